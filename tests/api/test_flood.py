"""Connection floods must not shut the API out (`make run`: Waitress alone, no nginx).

Issue 10: waitress's default connection_limit (100) was reached by 120 connections that
never finished their headers; ~150 s without an answer. Issue 25: with the limit at
1,000, 1,000 connections that trickle a header line every 5 s kept a fresh request
waiting 60 s, and 1,000 idle keep-alive connections 31 s. The goal: while one address
holds 1,000 of each, a normal authenticated GET is answered within a second, from that
address and from another one (appliance/api/connection_guard.py: the rules).

The API runs as its own process, started with the command and environment the supervisor
(`appliance up`) gives it, and with a soft descriptor limit of 256, as a service may
get: the process must raise it itself to hold the connections.
"""

import http.client
import json
import os
import resource
import selectors
import socket
import ssl
import subprocess
import threading
import time

import pytest

from appliance import config, supervisor
from appliance.server import waitress_settings
from tests.apiserver import TOKEN_PATH, free_port
from tests.conftest import ADMIN_PASSWORD, RUN_LOG_DIR
from tests import processes
from tests.secret.conftest import wait_for
from tests.waiting import eventually

FLOOD = 1000                    # the issue's: of each kind, trickling and idle
TRICKLE_SECONDS = 5             # the issue's: a header line every 5 s
OTHER_ADDRESS = "127.0.0.2"     # another client: loopback is all of 127/8
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
    # free_port() is a guess: on a machine shared with other test runs another process
    # may bind the port first. A start that exits saying so is retried on another port
    # (it used to leave the test waiting its whole minute for an answer, then fail).
    STARTS = 3

    def __init__(self, tmp_path, **overrides):
        for attempt in range(self.STARTS):
            self._start(tmp_path, overrides)
            wait_for(lambda: self.answers() or self.proc.poll() is not None, timeout=60)
            if self.proc.poll() is None:
                return
            with open(self.log_path, errors="replace") as f:
                said = f.read()
            if "Address already in use" not in said or attempt == self.STARTS - 1:
                raise AssertionError(f"the API process exited at start:\n{said[-3000:]}")

    def _start(self, tmp_path, overrides):
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

    def answers(self):
        try:
            return self.get("/v1/health")[0] == 200
        except OSError:
            return False

    def get(self, path, token=None, source="127.0.0.1"):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30,
                                          source_address=(source, 0))
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"}
                         if token else {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def login(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", TOKEN_PATH, body=json.dumps({
                "grant_type": "password", "username": "admin", "password": ADMIN_PASSWORD,
                "scope": ""}), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, body
            return json.loads(body)["access_token"]
        finally:
            conn.close()

    def connections(self):
        """How many established TCP connections the API process holds. Counted by state,
        not by descriptors: a connection that its client already closed (an earlier
        request's, in CLOSE_WAIT until the server gets to it) is not one of the flood's."""
        return self._sockets_in(("01",))

    def settled(self):
        """No connection left of the start-up's health checks: none established, none its
        client closed that the server has yet to see (CLOSE_WAIT, 08). Until then the
        per-address guard may still count one, and a test's first connections would be
        refused for a cap they did not reach (seen under load)."""
        return self._sockets_in(("01", "08")) == 0

    def _sockets_in(self, states):
        """How many of the process's TCP sockets are in one of these states."""
        fds = f"/proc/{self.proc.pid}/fd"
        inodes = set()
        for fd in os.listdir(fds):
            try:
                link = os.readlink(f"{fds}/{fd}")
            except FileNotFoundError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
        count = 0
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{self.proc.pid}/net/{table}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    count += fields[3] in states and fields[9] in inodes
        return count

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
    except ConnectionError:
        return False
    finally:
        s.setblocking(True)


def closed_by_server(s, timeout):
    """Whether the server closes `s` within `timeout` (anything it sends first is read)."""
    s.settimeout(timeout)
    try:
        while s.recv(4096):
            pass
        return True
    except (ConnectionError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


class Closing:
    """Whether the server has closed every one of `socks` yet, asked without waiting: a
    socket the server closed turns readable, and only those are read to their end. Lets a
    test stop waiting out a deadline once what the deadline is for has happened."""

    def __init__(self, socks):
        self.selector = selectors.DefaultSelector()
        for s in socks:
            self.selector.register(s, selectors.EVENT_READ)
        self.left = len(socks)

    def all_closed(self):
        for key, _ in self.selector.select(0):
            if closed_by_server(key.fileobj, 0.01):
                self.selector.unregister(key.fileobj)
                self.left -= 1
        return self.left == 0

    def close(self):
        self.selector.close()


class Flood:
    """From one address: FLOOD connections that trickle a header line every
    TRICKLE_SECONDS (a thread sends them), and FLOOD keep-alive connections idle after
    one answered request. Sends are best effort: the server may have closed any of them.
    `connect()` gives one connected socket (a TLS one for nginx's site)."""

    def __init__(self, port, count=FLOOD, connect=None):
        self.port = port
        self.connect = connect or (
            lambda: socket.create_connection(("127.0.0.1", port), timeout=30))
        self.trickling, self.idle = [], []
        self.stopping = threading.Event()
        try:
            for _ in range(count):
                self.trickling.append(
                    self._connect(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n"))
            for _ in range(count):
                self.idle.append(
                    self._connect(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n"))
            self.answered = sum(self._answered(s) for s in self.idle)
        except BaseException:
            for s in self.trickling + self.idle:
                s.close()
            raise
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _connect(self, first):
        s = self.connect()
        try:
            s.sendall(first)
        except OSError:
            pass
        return s

    @staticmethod
    def _answered(s):
        s.settimeout(5)
        try:
            return s.recv(64).startswith(b"HTTP/1.1 ")
        except OSError:
            return False

    def _trickle(self):
        line = 0
        while not self.stopping.wait(TRICKLE_SECONDS):
            line += 1
            for s in self.trickling:
                try:
                    s.send(f"X-Trickle-{line}: 1\r\n".encode())
                except OSError:
                    pass

    def stop_trickling(self):
        self.stopping.set()
        self.thread.join(timeout=30)

    def close(self):
        self.stop_trickling()
        for s in self.trickling + self.idle:
            s.close()


@pytest.fixture
def api(tmp_path):
    own_descriptors(2 * FLOOD + 300)
    proc = ApiProcess(tmp_path)
    yield proc
    proc.stop()


def timed_get(api, path, token, source):
    started = time.monotonic()
    status, body = api.get(path, token, source)
    return status, body, time.monotonic() - started


@pytest.mark.slow
def test_an_authenticated_get_is_answered_within_a_second_beside_a_flood_from_one_address(api):
    token = api.login()
    path = "/v1/iam/projects"
    # a first answer before the flood: what is measured is the flood's cost, not the
    # first request's lazy imports (over a second with CPU hogs beside the suite)
    assert api.get(path, token)[0] == 200
    assert api.get(path, token, OTHER_ADDRESS)[0] == 200
    per_address = api.settings["api_connections_per_address"]
    flood = Flood(api.port)
    try:
        # the flood's own requests were answered while it kept displacing its own oldest
        # connections: the server never held more than its cap from that address
        assert flood.answered > 0
        # a snapshot may catch the accept of a newer connection before the server's loop
        # closed the oldest it displaces (a loaded machine stretches that gap): the cap is
        # what the server settles to, so a reading is taken until it holds or 5 s pass
        eventually(lambda: api.connections() <= per_address + 1, 5,
                   f"at most {per_address + 1} connections held")
        # until the server closed the whole flood, at most past two trickled lines and the
        # header deadline (10 s): a server that kept a connection still fails below
        timings = []
        closing = Closing(flood.trickling + flood.idle)
        deadline = time.monotonic() + api.settings["api_header_timeout"] + 2 * TRICKLE_SECONDS
        while time.monotonic() < deadline:
            for source in ("127.0.0.1", OTHER_ADDRESS):
                status, body, took = timed_get(api, path, token, source)
                assert status == 200, body
                timings.append((source, took))
            if closing.all_closed():
                break
            time.sleep(1)
        closing.close()
        worst = max(took for _, took in timings)
        print(f"\n{len(timings)} authenticated GETs beside {FLOOD} trickling and {FLOOD} idle "
              f"connections of one address: worst {worst * 1000:.0f} ms, median "
              f"{sorted(t for _, t in timings)[len(timings) // 2] * 1000:.0f} ms")
        # the bound: "answered within a second". The answer itself takes
        # milliseconds on an idle machine; the bound holds with the suite running beside a
        # CPU hog, as the flood costs the server only its accepts and the trickled lines
        assert worst < BOUND_SECONDS, timings
        # the flood is closed, not held: every trickling connection is past its header
        # deadline, every idle one past the idle timeout (the rule, not only the cap)
        held = [s for s in flood.trickling + flood.idle if not closed_by_server(s, 0.01)]
        assert not held, f"{len(held)} flood connections still open"
        assert api.connections() <= 1
    finally:
        flood.close()
    assert api.get("/v1/health")[0] == 200


@pytest.mark.slow
def test_a_trickled_header_is_closed_at_its_deadline_though_never_silent(tmp_path):
    proc = ApiProcess(tmp_path, api_header_timeout=2.0, api_channel_timeout=60.0)
    try:
        s = slow_client(proc.port)
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 20 and not closed:
            try:
                s.sendall(b"1\r\nX-More: ")       # activity, every half second
            except OSError:
                closed = True
                break
            closed = closed_by_server(s, 0.5)
        # well before channel_timeout's 60 s of silence, which it never reached
        assert closed
        assert proc.get("/v1/health")[0] == 200
        s.close()
    finally:
        proc.stop()


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(tmp_path):
    proc = ApiProcess(tmp_path, api_idle_timeout=1.0, api_channel_timeout=60.0)
    try:
        s = socket.create_connection(("127.0.0.1", proc.port), timeout=30)
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert s.recv(64).startswith(b"HTTP/1.1 200")
        # the answer said nothing of closing: it is the idle timeout that closes it
        assert closed_by_server(s, 30)
        s.close()
    finally:
        proc.stop()


def test_past_the_cap_of_an_address_its_longest_waiting_connection_makes_room(tmp_path):
    proc = ApiProcess(tmp_path, api_connections_per_address=3)
    try:
        wait_for(proc.settled, timeout=30)
        # two requests in hand (headers done, bodies arriving): never displaced
        busy = []
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", proc.port), timeout=30)
            s.sendall(b"POST /v1/health HTTP/1.1\r\nHost: localhost\r\n"
                      b"Content-Length: 10\r\n\r\n")
            busy.append(s)
        waiting = slow_client(proc.port)
        wait_for(lambda: proc.connections() >= 3, timeout=30)
        # a fourth from the same address: the half-sent header makes room for it
        status, _ = proc.get("/v1/health")
        assert status == 200
        assert closed_by_server(waiting, 30)
        assert all(still_open(s) for s in busy)
        # another address has room of its own
        assert proc.get("/v1/health", source=OTHER_ADDRESS)[0] == 200
        waiting.close()
    finally:
        proc.stop()


def test_past_the_cap_with_every_request_in_hand_the_new_connection_gets_429(tmp_path):
    proc = ApiProcess(tmp_path, api_connections_per_address=2)
    busy = []
    try:
        wait_for(proc.settled, timeout=30)
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", proc.port), timeout=30)
            s.sendall(b"POST /v1/health HTTP/1.1\r\nHost: localhost\r\n"
                      b"Content-Length: 10\r\n\r\n")
            busy.append(s)
        wait_for(lambda: proc.connections() >= 2, timeout=30)
        refused = socket.create_connection(("127.0.0.1", proc.port), timeout=30)
        answer = b""
        try:
            while chunk := refused.recv(4096):
                answer += chunk
        except ConnectionError:
            pass
        refused.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 429")
        assert b"\r\nRetry-After: 1" in head
        assert json.loads(body)["code"] == 429
        # nothing changed for those in hand, nor for another address
        assert all(still_open(s) for s in busy)
        assert proc.get("/v1/health", source=OTHER_ADDRESS)[0] == 200
    finally:
        for s in busy:
            s.close()
        proc.stop()


def test_at_the_connection_limit_a_waiting_connection_makes_room_instead_of_a_backlog(tmp_path):
    """No per-address cap (the image's setting: nginx is the API's only address): at the
    overall limit, the longest waiting connection is closed for the new one."""
    proc = ApiProcess(tmp_path, api_connections_per_address=0, api_connection_limit=20)
    waiting = []
    try:
        waiting = [slow_client(proc.port) for _ in range(30)]
        status, _ = proc.get("/v1/health")
        assert status == 200
        assert proc.connections() <= 20
        assert sum(closed_by_server(s, 0.01) for s in waiting) >= 10
    finally:
        for s in waiting:
            s.close()
        proc.stop()


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
