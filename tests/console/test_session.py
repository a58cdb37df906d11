"""The console's session (docs/console.md, "Server side"; docs/security.md, "Web console"):
login through the IAM's password grant and its throttling, the two cookies and their flags,
the CSRF check on every write made with the cookie, bearer clients unchanged, logout that
revokes, the project switch, and a project reader's cookie allowed no more than its token."""

import uuid

import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import bind, make_project, make_user

from .helpers import SESSION, Browser, assert_security_headers

CSRF_MESSAGE = "the X-CSRF-Token header must echo the appliance_csrf cookie"


def project_names(admin):
    return {p["name"] for p in admin.get("/v1/iam/projects").json}


def test_login_sets_the_two_cookies_and_describes_the_session(server):
    browser = Browser(server)
    resp = browser.login("admin", ADMIN_PASSWORD)
    assert resp.status == 200, resp
    assert_security_headers(resp)
    assert resp.header("cache-control") == "no-store"
    body = resp.json
    assert body["user"]["username"] == "admin" and "password_hash" not in body["user"]
    assert body["project_id"] is None
    assert body["expires_at"].endswith("Z")
    assert ADMIN_PROJECT in {p["uuid"] for p in body["projects"]}
    assert "*.*.*" in body["permissions"] or "iam.project.create" in body["permissions"]
    session, session_attrs = browser.last_cookies["appliance_session"]
    csrf, csrf_attrs = browser.last_cookies["appliance_csrf"]
    assert session.count(".") == 2         # a JWT: the access token itself
    assert session_attrs["httponly"] is True and session_attrs["samesite"] == "Strict"
    assert session_attrs["path"] == "/"
    assert 0 < int(session_attrs["max-age"]) <= server.settings["token_ttl"]
    assert "secure" not in session_attrs       # plain HTTP here: a Secure cookie would not return
    # the front end reads this one: not HttpOnly; 32 random bytes, urlsafe base64
    assert "httponly" not in csrf_attrs and csrf_attrs["samesite"] == "Strict"
    assert len(csrf) >= 43 and csrf_attrs["max-age"] == session_attrs["max-age"]
    again = browser.request("GET", SESSION)
    assert again.status == 200, again
    assert again.json["user"]["uuid"] == body["user"]["uuid"]
    assert again.json["permissions"] == body["permissions"]
    assert_security_headers(again)


@pytest.mark.parametrize("body", [
    {"username": "admin", "password": "wrong-password"},
    {"username": f"nobody-{uuid.uuid4().hex[:6]}", "password": "whatever-password"},
])
def test_a_wrong_password_sets_no_cookie(server, body):
    browser = Browser(server)
    resp = browser.request("POST", SESSION, body)
    assert resp.status == 401, resp
    assert resp.json == {"type": "Unauthorized", "code": 401,
                         "message": "wrong username or password"}
    assert browser.last_cookies == {} and browser.jar == {}
    assert_security_headers(resp)


@pytest.mark.parametrize("body", [{"username": "admin"}, {"password": "x"},
                                  {"username": 5, "password": "x"}, ["admin"],
                                  {"username": "admin", "password": "x", "project": "p1"}])
def test_a_malformed_login_is_400(server, body):
    resp = Browser(server).request("POST", SESSION, body)
    assert resp.status == 400, resp
    assert resp.json["type"] == "ValidationError"


def test_no_cookie_no_session(server):
    resp = Browser(server).request("GET", SESSION)
    assert resp.status == 401, resp
    assert_security_headers(resp)       # an error raised before the handler too
    browser = Browser(server)
    browser.jar["appliance_session"] = "not.a.token"
    assert browser.request("GET", SESSION).status == 401


@pytest.fixture
def throttled_server(tmp_path, console_dir):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, console_static_dir=console_dir,
                    login_free_failures_user=2, login_first_delay=5.0,
                    login_max_delay_user=5.0).start()
    yield srv
    srv.stop()


def test_console_logins_are_throttled_as_the_token_endpoint(throttled_server):
    srv = throttled_server
    user, name, password = make_user(srv.client(srv.login("admin", ADMIN_PASSWORD)))
    browser = Browser(srv)
    for _ in range(2):
        assert browser.login(name, "wrong-password").status == 401
    refused = browser.login(name, password)
    assert refused.status == 429, refused
    assert refused.json["type"] == "TooManyRequests"
    assert "try again in" in refused.json["message"]
    assert int(refused.header("retry-after")) >= 1
    assert browser.jar == {}
    # one throttle for both doors: the token endpoint refuses that user too
    assert srv.token_response(name, password).status == 429


def test_a_cookie_write_needs_the_csrf_header(server, admin):
    browser = Browser(server)
    assert browser.login("admin", ADMIN_PASSWORD).status == 200
    before = project_names(admin)
    name = f"csrf-{uuid.uuid4().hex[:8]}"
    for headers in ({}, {"X-CSRF-Token": "wrong-" + browser.jar["appliance_csrf"]},
                    {"X-CSRF-Token": ""}):
        refused = browser.request("POST", "/v1/iam/projects", {"name": name},
                                  headers=headers, csrf=False)
        assert refused.status == 403, refused
        assert refused.json == {"type": "Forbidden", "code": 403, "message": CSRF_MESSAGE}
        assert project_names(admin) == before       # the refused write changed nothing
    # a forged CSRF cookie with the matching header is no better than none: the cookie
    # holds no session then... but a session cookie with its CSRF cookie removed is refused
    bare = Browser(server)
    bare.jar["appliance_session"] = browser.jar["appliance_session"]
    refused = bare.request("POST", "/v1/iam/projects", {"name": name},
                           headers={"X-CSRF-Token": ""}, csrf=False)
    assert refused.status == 403 and project_names(admin) == before
    # DELETE and PUT are writes too
    victim = make_project(admin)
    assert browser.request("DELETE", f"/v1/iam/projects/{victim}", csrf=False).status == 403
    assert admin.get(f"/v1/iam/projects/{victim}").status == 200
    # the page's own request, echoing the cookie: accepted
    created = browser.request("POST", "/v1/iam/projects", {"name": name})
    assert created.status == 201, created
    assert name in project_names(admin)
    # reads need no header
    assert browser.request("GET", "/v1/iam/projects").status == 200


def test_bearer_clients_are_unchanged(server, admin):
    """A bearer token is never attached by a browser on its own: no CSRF header asked, and
    a cookie beside it is ignored (the header wins)."""
    name = f"bearer-{uuid.uuid4().hex[:8]}"
    resp = admin.post("/v1/iam/projects", {"name": name})
    assert resp.status == 201, resp
    browser = Browser(server)
    browser.jar["appliance_session"] = "not.a.token"
    resp = browser.request("GET", "/v1/iam/projects",
                           headers={"Authorization": f"Bearer {admin.token}"})
    assert resp.status == 200 and name in {p["name"] for p in resp.json}


def test_the_event_stream_works_by_cookie(server):
    browser = Browser(server)
    assert browser.login("admin", ADMIN_PASSWORD).status == 200
    resp = browser.request("GET", "/v1/events?kind=iam_projects&wait=0")
    assert resp.status == 200, resp
    assert resp.header("content-type").startswith("text/event-stream")
    assert b": end " in resp.raw
    assert Browser(server).request("GET", "/v1/events?wait=0").status == 401


def test_logout_revokes_the_session(server):
    browser = Browser(server)
    assert browser.login("admin", ADMIN_PASSWORD).status == 200
    kept = dict(browser.jar)
    # another site's request (no CSRF header) may not log the user out
    refused = browser.request("DELETE", SESSION, csrf=False)
    assert refused.status == 403, refused
    assert browser.request("GET", SESSION).status == 200
    resp = browser.request("DELETE", SESSION)
    assert resp.status == 204, resp
    assert_security_headers(resp)
    for name in ("appliance_session", "appliance_csrf"):
        value, attrs = browser.last_cookies[name]
        assert value == "" and attrs["max-age"] == "0"
    assert browser.jar == {}
    # the old cookie, replayed: the session is revoked, not just forgotten by the browser
    replay = Browser(server)
    replay.jar.update(kept)
    assert replay.request("GET", SESSION).status == 401
    assert replay.request("GET", "/v1/iam/projects").status == 401
    # logging out with no session or a dead one still clears the cookies
    assert replay.request("DELETE", SESSION).status == 204
    assert replay.jar == {}


def test_project_switch(server, admin):
    owned = make_project(admin)
    other = make_project(admin)
    user, name, password = make_user(admin)
    bind(admin, user, "owner", owned)
    browser = Browser(server)
    login = browser.login(name, password)
    assert login.status == 200, login
    assert {p["uuid"] for p in login.json["projects"]} == {owned}
    first_cookie = browser.jar["appliance_session"]
    moved = browser.request("PUT", SESSION, {"project": owned})
    assert moved.status == 200, moved
    assert moved.json["project_id"] == owned
    assert moved.json["expires_at"] <= login.json["expires_at"]   # never lengthened
    assert browser.jar["appliance_session"] != first_cookie
    assert browser.request("GET", SESSION).json["project_id"] == owned
    # a project it is not bound in: 403, and the session stays where it was
    refused = browser.request("PUT", SESSION, {"project": other})
    assert refused.status == 403, refused
    assert refused.json["type"] == "Forbidden"
    assert browser.request("GET", SESSION).json["project_id"] == owned
    assert browser.request("PUT", SESSION, {"project": "nope"}).status == 400
    # the switch is a write: CSRF applies
    assert browser.request("PUT", SESSION, {"project": None}, csrf=False).status == 403
    assert browser.request("PUT", SESSION, {"project": None}).json["project_id"] is None
    # logout of the moved session revokes the whole session (the first cookie too)
    assert browser.request("DELETE", SESSION).status == 204
    replay = Browser(server)
    replay.jar["appliance_session"] = first_cookie
    assert replay.request("GET", SESSION).status == 401


def test_login_into_a_project(server, admin):
    project = make_project(admin)
    other = make_project(admin)
    user, name, password = make_user(admin)
    bind(admin, user, "reader", project)
    resp = Browser(server).login(name, password, project)
    assert resp.status == 200 and resp.json["project_id"] == project
    refused = Browser(server)
    resp = refused.login(name, password, other)
    assert resp.status == 403, resp
    assert refused.jar == {}


def test_a_reader_s_cookie_may_do_what_its_token_may_and_no_more(server, admin):
    project = make_project(admin)
    user, name, password = make_user(admin)
    bind(admin, user, "reader", project)
    token_client = server.client(server.login(name, password, f"project:{project}"))
    browser = Browser(server)
    assert browser.login(name, password, project).status == 200
    session = browser.request("GET", SESSION).json
    assert all(not p.endswith(".create") for p in session["permissions"]), session
    record = {"name": f"zone{uuid.uuid4().hex[:6]}.example.", "project_id": project}
    before = admin.get("/v1/dns/domains", query={"project_id": project}).json
    by_token = token_client.post("/v1/dns/domains", record)
    by_cookie = browser.request("POST", "/v1/dns/domains", record)
    assert by_token.status == by_cookie.status == 403, (by_token, by_cookie)
    assert admin.get("/v1/dns/domains", query={"project_id": project}).json == before
    # reads: the same answer either way
    assert token_client.get("/v1/dns/domains").json == \
        browser.request("GET", "/v1/dns/domains").json
    # another project's records: no more visible by cookie than by token
    assert token_client.get(f"/v1/iam/projects/{ADMIN_PROJECT}").status == \
        browser.request("GET", f"/v1/iam/projects/{ADMIN_PROJECT}").status


def test_logout_reads_only_the_cookie(server):
    """A bearer token sent to the console's logout is not read, let alone revoked: bearer
    clients log out at the IAM's logout route."""
    token = server.login("admin", ADMIN_PASSWORD)
    resp = server.client(token).delete(SESSION)
    assert resp.status == 204, resp
    assert server.client(token).get("/v1/iam/projects").status == 200


def test_a_cookie_behind_nginx_auth_request_is_a_write_when_the_original_is(server, admin):
    """nginx's auth_request asks with a GET on behalf of the real request (an element
    upload, docs/upload-auth.md) and names its method in X-Original-Method: a cookie
    request standing for a PUT must carry the CSRF header like the PUT itself."""
    browser = Browser(server)
    assert browser.login("admin", ADMIN_PASSWORD).status == 200
    refused = browser.request("GET", "/v1/iam/projects", headers={"X-Original-Method": "PUT"})
    assert refused.status == 403, refused
    assert refused.json["message"] == CSRF_MESSAGE
    allowed = browser.request("GET", "/v1/iam/projects", headers={
        "X-Original-Method": "PUT", "X-CSRF-Token": browser.jar["appliance_csrf"]})
    assert allowed.status == 200, allowed
    assert browser.request("GET", "/v1/iam/projects",
                           headers={"X-Original-Method": "GET"}).status == 200


def test_console_logins_are_in_the_audit_trail_without_the_password(server, admin):
    user, name, password = make_user(admin, password="console-secret-password")
    browser = Browser(server)
    assert browser.login(name, "wrong-password").status == 401
    assert browser.login(name, password).status == 200
    listed = admin.get("/v1/audit/")
    assert listed.status == 200
    logins = [e["login"] for e in admin.get("/v1/audit/", query={"actor": name}).json
              if "login" in e]
    assert {"username": name, "succeeded": False} in logins
    assert {"username": name, "succeeded": True} in logins
    assert password.encode() not in listed.raw and b"wrong-password" not in listed.raw


@pytest.fixture
def quick_heartbeat_server(tmp_path, console_dir):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, console_static_dir=console_dir,
                    events_heartbeat_seconds=0.5).start()
    yield srv
    srv.stop()


def test_an_event_stream_by_cookie_ends_when_the_session_is_logged_out(
        quick_heartbeat_server):
    """An EventSource sends no header of its own, so the console's live view holds the
    stream by cookie; logging out ends it (at its next heartbeat), as revoking a token does."""
    import socket
    import time
    srv = quick_heartbeat_server
    browser = Browser(srv)
    assert browser.login("admin", ADMIN_PASSWORD).status == 200
    cookie = "; ".join(f"{k}={v}" for k, v in browser.jar.items())
    sock = socket.create_connection((srv.host, srv.port), timeout=30)
    try:
        sock.sendall(f"GET /v1/events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n"
                     f"Accept: text/event-stream\r\n\r\n".encode())
        seen = b""
        sock.settimeout(1)
        deadline = time.monotonic() + 60
        while b"retry:" not in seen and time.monotonic() < deadline:
            try:
                seen += sock.recv(65536)
            except (TimeoutError, socket.timeout):
                pass
        assert seen.startswith(b"HTTP/1.1 200"), seen
        assert browser.request("DELETE", SESSION).status == 204
        while b"event: end" not in seen and time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, socket.timeout):
                continue
            if not chunk:
                break
            seen += chunk
        assert b"event: end" in seen and b"token revoked" in seen, seen[-500:]
    finally:
        sock.close()
