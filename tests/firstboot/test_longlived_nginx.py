"""Long-lived connections through the image's front door (docs/long-lived.md): first
boot's nginx site on a real nginx, in front of the real API process (as its unit runs it),
carries event streams and a payload long poll that the API parks on its event loop, with
the one base URL clients and agents use (`/api/core/`), while ordinary GETs answer."""

import json

import pytest

from appliance.firstboot import nginx, tls
from tests.api.test_flood import ApiProcess
from tests.firstboot.test_nginx_flood import https_get, https_login, tls_context
from tests.nginx import Nginx, free_port, require_nginx
from tests.raw_http import opened as opened_raw
from tests.raw_http import read_until

STREAMS = 20


@pytest.fixture
def front(tmp_path):
    require_nginx("http_ssl_module")
    api = ApiProcess(tmp_path, api_connections_per_address=0, api_threads=4)
    try:
        cert_path, key_path, _ = tls.ensure(str(tmp_path / "tls"), "box")
        port = free_port()
        body = nginx.server_body(cert_path, key_path, f"127.0.0.1:{api.port}",
                                 api.settings["max_upload_bytes"])
        with Nginx(f"listen 127.0.0.1:{port} ssl;\n" + body,
                   prefix=str(tmp_path / "nginx"), http_context=nginx.http_context()):
            yield port, api
    finally:
        api.stop()


def opened(port, path, token, accept="application/json"):
    """A GET held open through the front door (TLS, its host name)."""
    return opened_raw(port, path, token, accept, host="box", wrap=tls_context().wrap_socket)


def whole_response(seen):
    """A whole JSON answer: nginx sends it chunked (ended by the last, empty chunk), the API
    alone with a Content-Length (ended by the body's closing brace). Waiting for the brace
    alone on a chunked answer waited out read_until's timeout."""
    head, sep, body = seen.partition(b"\r\n\r\n")
    if not sep:
        return False
    if b"transfer-encoding: chunked" in head.lower():
        return body.endswith(b"0\r\n\r\n")
    return body.rstrip().endswith(b"}")


def test_streams_and_a_long_poll_through_nginx(front):
    from appliance.agent.credentials import issue_credential
    from state import Store
    port, api = front
    token = https_login(port)
    store = Store(api.settings["state_dir"])
    try:
        node = store.collection("compute_nodes").insert({
            "name": "front-hw", "node_type": "HW", "status": "ACTIVE",
            "project_id": "00000000-0000-0000-0000-000000000000"})
        cred = issue_credential(store, node["uuid"])
    finally:
        store.close()
    agent_token = https_client_token(port, cred)
    payload = f"/api/core/v1/ua/agents/{cred['agent']}/payload"
    status, _, body = https_get(port, payload, agent_token, "127.0.0.1")
    assert status == 200, body
    current = json.loads(body)["hash"]
    # more streams plus a poll than the API has threads (4)
    streams = [opened(port, "/api/core/v1/events", token, "text/event-stream")
               for _ in range(STREAMS)]
    poll = opened(port, f"{payload}?hash={current}&wait=5", agent_token)
    try:
        for s in streams:
            assert read_until(s, lambda b: b"retry:" in b).startswith(b"HTTP/1.1 200")
        status, _, _ = https_get(port, "/api/core/v1/iam/projects", token, "127.0.0.1")
        assert status == 200
        # an event reaches every stream through nginx
        made = https_post(port, "/api/core/v1/iam/projects", token, {"name": "front-one"})
        for s in streams:
            assert b"front-one" in read_until(s, lambda b: b"front-one" in b)
        # the poll answers with its payload when its wait runs out (nothing changed for it)
        answered = read_until(poll, whole_response, timeout=20)
        head, _, rest = answered.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and current.encode() in rest
        assert made["name"] == "front-one"
    finally:
        for s in streams + [poll]:
            s.close()


def https_client_token(port, cred):
    return https_post(port, "/api/core/v1/iam/clients/default/actions/get_token/invoke", None, {
        "grant_type": "client_credentials", "client_id": cred["agent"],
        "client_secret": cred["secret"]})["access_token"]


def https_post(port, path, token, body):
    import http.client
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls_context(), timeout=30)
    try:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status in (200, 201), data
        return json.loads(data)
    finally:
        conn.close()
