"""Connections that open and never finish their headers must not shut the API out.

Before: waitress's default connection_limit (100) was reached by 120 such connections,
and it accepted nothing more until its channel_timeout (120 s) plus a cleanup interval
(30 s) closed them: ~150 s without an answer. The goal of issue 10: with 300 of them
open, a normal request is answered within a second.

The API runs as its own process, started with the command and environment the supervisor
(`appliance up`) gives it, and with a soft descriptor limit of 256, as a service may
get: the process must raise it itself to hold 300 connections.
"""

import http.client
import os
import resource
import socket
import subprocess
import time

import pytest

from appliance import config, supervisor
from appliance.server import waitress_settings
from tests.apiserver import free_port
from tests.conftest import ADMIN_PASSWORD, RUN_LOG_DIR
from tests import processes
from tests.secret.conftest import wait_for

FLOOD = 300
# the bound: "answered within a second". The answer itself takes milliseconds on
# an idle machine; the bound holds with the suite running beside a CPU hog.
BOUND_SECONDS = 1.0
SERVICE_SOFT_LIMIT = 256


def own_descriptors(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the hard descriptor limit {hard} is below {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


class ApiProcess:
    def __init__(self, tmp_path, **overrides):
        self.settings = config.load(environ={}, overrides={
            "state_dir": str(tmp_path / "state"), "admin_password": ADMIN_PASSWORD,
            "api_port": free_port(), **overrides})
        self.port = self.settings["api_port"]
        # as the API's systemd unit runs it (the supervisor forks the same main())
        (module,) = [m for n, m in supervisor.child_modules() if n == "api"]
        argv = supervisor.python_command(module)
        self.log_path = os.path.join(RUN_LOG_DIR, f"api-flood-{self.port}.log")
        log = open(self.log_path, "wb")
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.proc = subprocess.Popen(
            argv, env=supervisor.child_environment(self.settings, environ={}),
            stdout=log, stderr=log, preexec_fn=lambda: resource.setrlimit(
                resource.RLIMIT_NOFILE, (SERVICE_SOFT_LIMIT, hard)))
        log.close()
        wait_for(self.answers, timeout=60)

    def answers(self):
        try:
            return self.get("/v1/health")[0] == 200
        except OSError:
            return False

    def get(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def connections(self):
        """How many established TCP connections the API process holds. Counted by state,
        not by descriptors: a connection that its client already closed (an earlier
        request's, in CLOSE_WAIT until the server gets to it) is not one of the flood's."""
        fds = f"/proc/{self.proc.pid}/fd"
        inodes = set()
        for fd in os.listdir(fds):
            try:
                link = os.readlink(f"{fds}/{fd}")
            except FileNotFoundError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
        established = 0
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{self.proc.pid}/net/{table}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    established += fields[3] == "01" and fields[9] in inodes
        return established

    def stop(self):
        processes.stop(self.proc)


def slow_client(port):
    """A connection that sends part of its headers and then nothing."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
    return s


def still_open(s):
    s.setblocking(False)
    try:
        return s.recv(1) != b""         # data would be just as wrong as a close
    except BlockingIOError:
        return True
    finally:
        s.setblocking(True)


@pytest.fixture
def api(tmp_path):
    own_descriptors(FLOOD + 200)
    proc = ApiProcess(tmp_path)
    yield proc
    proc.stop()


def test_a_request_is_answered_within_a_second_beside_300_half_open_connections(api):
    # a first answer before the flood: what is measured is the flood's cost, not the
    # first request's lazy imports (over a second with CPU hogs beside the suite)
    assert api.get("/")[0] == 200
    flood = [slow_client(api.port) for _ in range(FLOOD)]
    try:
        # every one of them accepted and held by the server, not waiting in the backlog
        wait_for(lambda: api.connections() >= FLOOD, timeout=30)
        started = time.monotonic()
        status, body = api.get("/")
        took = time.monotonic() - started
        assert status == 200 and b"appliance" in body
        assert took < BOUND_SECONDS, f"answered in {took:.2f} s"
        assert api.get("/v1/health")[0] == 200
        # the server did not get there by dropping them: they are open, and one that
        # finally ends its headers is served
        assert all(still_open(s) for s in flood)
        flood[0].sendall(b"1\r\nConnection: close\r\n\r\n")
        assert flood[0].recv(64).startswith(b"HTTP/1.1 200")
    finally:
        for s in flood:
            s.close()


def test_a_silent_connection_is_closed_after_the_channel_timeout(tmp_path):
    proc = ApiProcess(tmp_path, api_channel_timeout=2.0)
    try:
        s = slow_client(proc.port)
        # the server closes it (recv gives b""), well before the client's own 30 s
        s.settimeout(30)
        assert s.recv(64) == b""
        s.close()
    finally:
        proc.stop()


def test_the_connection_limit_leaves_room_for_the_process_own_descriptors():
    settings = config.load(environ={}, overrides={"api_connection_limit": 5000})
    assert waitress_settings(settings)["connection_limit"] == 5000
    assert waitress_settings(settings, descriptors=1024)["connection_limit"] == 1024 - 64
    assert waitress_settings(settings, descriptors=10**6)["connection_limit"] == 5000
    env = config.load(environ={"APPLIANCE_API_CONNECTION_LIMIT": "2000",
                               "APPLIANCE_API_CHANNEL_TIMEOUT": "10"})
    adjusted = waitress_settings(env)
    assert adjusted["connection_limit"] == 2000
    assert adjusted["channel_timeout"] == 10.0 and adjusted["cleanup_interval"] == 2
