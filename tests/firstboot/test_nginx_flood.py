"""The image's flood goal on this host: first boot's nginx site, on a real nginx, in front
of the real API process, holds one address's 1,000 trickling and 1,000 idle TLS
connections while a normal authenticated GET is answered within a second, from that
address and from another one (issue 25; docs/security.md, "Floods").

The site is first boot's own (appliance/firstboot/nginx.py: http_context and
server_body), on a loopback port in a temp prefix; the worker limits are read from the
image's nginx.conf (image-build/files/appliance/etc/nginx/nginx.conf). The API runs as the
image's unit runs it: no per-address cap (nginx is its only address).
"""

import http.client
import json
import os
import re
import resource
import socket
import ssl
import time

import pytest

from appliance.firstboot import nginx, tls
from tests.api.test_flood import (BOUND_SECONDS, FLOOD, OTHER_ADDRESS, TRICKLE_SECONDS,
                                  ApiProcess, Closing, Flood, closed_by_server,
                                  own_descriptors)
from tests.apiserver import TOKEN_PATH
from tests.conftest import ADMIN_PASSWORD
from tests.nginx import Nginx, free_port, require_nginx

IMAGE_NGINX_CONF = "image-build/files/appliance/etc/nginx/nginx.conf"


def image_worker_limits():
    """(worker_connections, worker_rlimit_nofile) of the image's nginx.conf."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, IMAGE_NGINX_CONF)).read()
    connections = int(re.search(r"^\s*worker_connections\s+(\d+);", text, re.M).group(1))
    nofile = int(re.search(r"^\s*worker_rlimit_nofile\s+(\d+);", text, re.M).group(1))
    return connections, nofile


def tls_context():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def https_get(port, path, token, source):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls_context(), timeout=30,
                                       source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"}
                     if token else {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def https_login(port):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls_context(), timeout=30)
    try:
        conn.request("POST", TOKEN_PATH, body=json.dumps({
            "grant_type": "password", "username": "admin",
            "password": ADMIN_PASSWORD, "scope": ""}),
            headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, body
        return json.loads(body)["access_token"]
    finally:
        conn.close()


@pytest.fixture
def site(tmp_path):
    """The API (as the image runs it) behind first boot's site on a real nginx: the TLS port."""
    require_nginx("http_ssl_module")
    own_descriptors(2 * FLOOD + 300)
    # nginx inherits the test's limit; worker_rlimit_nofile raises it where root may
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    api = ApiProcess(tmp_path, api_connections_per_address=0)
    try:
        cert_path, key_path, _ = tls.ensure(str(tmp_path / "tls"), "box")
        tls_port = free_port()
        connections, nofile = image_worker_limits()
        body = nginx.server_body(cert_path, key_path, f"127.0.0.1:{api.port}",
                                 api.settings["max_upload_bytes"])
        with Nginx(f"listen 127.0.0.1:{tls_port} ssl;\n" + body,
                   prefix=str(tmp_path / "nginx"), http_context=nginx.http_context(),
                   main_context=f"worker_rlimit_nofile {nofile};\n",
                   worker_connections=connections) as server:
            yield tls_port, server
    finally:
        api.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
def test_an_authenticated_get_through_nginx_is_answered_within_a_second_beside_a_flood(site):
    port, server = site
    token = https_login(port)
    path = "/api/core/v1/iam/projects"
    assert https_get(port, path, token, "127.0.0.1")[0] == 200
    assert https_get(port, path, token, OTHER_ADDRESS)[0] == 200

    ctx = tls_context()

    def connect():
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        return ctx.wrap_socket(raw)

    flood = Flood(port, connect=connect)
    try:
        # nginx answered the idle connections' requests (200s, and 429s past the rate)
        assert flood.answered > FLOOD // 2
        timings = []
        # until nginx closed every trickling connection, at most past two trickled lines
        # and the header deadline: one still open then fails below
        closing = Closing(flood.trickling)
        deadline = time.monotonic() + nginx.HEADER_TIMEOUT + 2 * TRICKLE_SECONDS
        while time.monotonic() < deadline:
            for source in ("127.0.0.1", OTHER_ADDRESS):
                started = time.monotonic()
                status, headers, body = https_get(port, path, token, source)
                took = time.monotonic() - started
                timings.append((source, status, took))
                if source == OTHER_ADDRESS:
                    # another address is not touched by the flood's limits
                    assert status == 200, body
                else:
                    # the flooding address itself: served, or told when to come back
                    assert status == 200 or (status == 429 and headers.get("Retry-After")
                                             and json.loads(body)["code"] == 429), body
            if closing.all_closed():
                break
            time.sleep(1)
        closing.close()
        worst = max(took for *_, took in timings)
        print(f"\n{len(timings)} authenticated GETs through nginx beside {FLOOD} trickling "
              f"and {FLOOD} idle TLS connections of one address: worst {worst * 1000:.0f} ms, "
              f"median {sorted(t for *_, t in timings)[len(timings) // 2] * 1000:.0f} ms, "
              f"statuses {sorted({(s, st) for s, st, _ in timings})}")
        # the bound, as tests/api/test_flood.py asserts it: the answer takes
        # milliseconds; nginx holds the waiting connections in its event loop
        assert worst < BOUND_SECONDS, timings
        # past client_header_timeout every trickling connection is closed by nginx,
        # though it kept sending (nginx's header timer is not reset by a trickled byte)
        flood.stop_trickling()
        held = [s for s in flood.trickling if not closed_by_server(s, 0.01)]
        assert not held, f"{len(held)} trickling connections still open"
    finally:
        flood.close()
    assert "worker_connections are not enough" not in server.error_log()


@pytest.mark.slow
def test_past_the_rate_nginx_answers_429_with_retry_after_and_another_address_is_served(site):
    port, _ = site
    ctx = tls_context()
    statuses = []
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        # one keep-alive connection, requests back to back until the burst is spent (the
        # bucket drains at the rate meanwhile: a bounded number more than the burst)
        while 429 not in statuses and len(statuses) < 20 * nginx.LIMIT_BURST:
            conn.request("GET", "/v1/health")
            resp = conn.getresponse()
            body = resp.read()
            statuses.append(resp.status)
            if resp.status == 429:
                refused = (resp.getheader("Retry-After"), json.loads(body))
    finally:
        conn.close()
    assert 429 in statuses
    retry_after, error = refused
    assert retry_after == "1"
    assert error["type"] == "TooManyRequests" and error["code"] == 429
    assert https_get(port, "/v1/health", None, OTHER_ADDRESS)[0] == 200
