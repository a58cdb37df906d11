"""The token endpoint, forged tokens, refresh, logout, introspection."""

import base64
import json
import os
import stat
import statistics
import time
import urllib.parse
import uuid

import jwt
import pytest

from appliance.iam import tokens
from tests.apiserver import TOKEN_PATH
from tests.conftest import ADMIN_PASSWORD

from .helpers import make_project, make_user

INTROSPECT = "/v1/iam/clients/default/actions/introspect"
LOGOUT = "/v1/iam/clients/default/actions/logout/invoke"


def oauth_error(resp, status, error):
    assert resp.status == status, resp
    assert set(resp.json) == {"error", "error_description"}
    assert resp.json["error"] == error
    assert resp.header("cache-control") == "no-store"


def test_password_grant_response_shape(server):
    resp = server.token_response("admin", ADMIN_PASSWORD)
    assert resp.status == 200
    body = resp.json
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == server.settings["token_ttl"]
    for key in ("access_token", "refresh_token", "expires_at", "refresh_expires_in", "scope"):
        assert key in body
    claims = jwt.decode(body["access_token"], options={"verify_signature": False})
    assert {"sub", "jti", "iat", "exp", "iss", "aud", "project_id"} <= set(claims)
    assert claims["project_id"] is None


def test_form_encoded_token_request(server):
    form = urllib.parse.urlencode({"grant_type": "password", "username": "admin",
                                   "password": ADMIN_PASSWORD}).encode()
    resp = server.client().post(TOKEN_PATH, raw=form,
                                content_type="application/x-www-form-urlencoded")
    assert resp.status == 200 and resp.json["access_token"]


def test_wrong_password_and_unknown_user_look_the_same(server, admin):
    wrong = server.token_response("admin", "not-the-password")
    unknown = server.token_response("nobody-at-all", "not-the-password")
    oauth_error(wrong, 400, "invalid_grant")
    oauth_error(unknown, 400, "invalid_grant")
    assert wrong.json == unknown.json

    def timed(username, source):
        start = time.perf_counter()
        oauth_error(server.token_response(username, "not-the-password", source=source),
                    400, "invalid_grant")
        return time.perf_counter() - start

    # interleaved, so that a change of the machine's load hits both sides alike. One
    # failure per user and per source address: this measures the KDF, not login
    # throttling, whose 429 comes before the KDF for known and unknown names alike
    # (tests/iam/test_login_throttle.py)
    pairs = [(timed(make_user(admin)[1], f"127.0.3.{i}"),
              timed(f"nobody-{uuid.uuid4().hex[:8]}", f"127.0.4.{i}")) for i in range(1, 10)]
    known = statistics.median(k for k, _ in pairs)
    missing = statistics.median(m for _, m in pairs)
    # both run the slow KDF: an unknown user is not answered measurably faster
    assert missing > known * 0.5, (known, missing)


def test_token_endpoint_errors(server):
    client = server.client()
    oauth_error(client.post(TOKEN_PATH, {"grant_type": "authorization_code"}), 400,
                "unsupported_grant_type")
    # client_credentials is the node agents' grant (tests/agent/test_credentials.py)
    oauth_error(client.post(TOKEN_PATH, {"grant_type": "client_credentials"}), 400,
                "invalid_request")
    oauth_error(client.post(TOKEN_PATH, {"username": "admin"}), 400, "invalid_request")
    oauth_error(client.post(TOKEN_PATH, {"grant_type": "password"}), 400, "invalid_request")
    oauth_error(client.post(TOKEN_PATH, {"grant_type": "refresh_token",
                                         "refresh_token": "garbage"}), 400, "invalid_grant")
    oauth_error(client.post(TOKEN_PATH.replace("default", "11111111-1111-1111-1111-111111111111"),
                            {"grant_type": "password", "username": "admin",
                             "password": ADMIN_PASSWORD}), 401, "invalid_client")
    oauth_error(server.token_response("admin", ADMIN_PASSWORD, scope="everything"), 400,
                "invalid_scope")


def forge(claims, key=b"not the signing key, but long enough", alg="HS256"):
    return jwt.encode(claims, key, algorithm=alg)


def b64(data):
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_forged_tokens_are_401(server, admin):
    good = admin.token
    claims = jwt.decode(good, options={"verify_signature": False})
    header, payload, signature = good.split(".")
    key = server.store.read_private(tokens.KEY_FILE)
    now = int(time.time())
    forged = {
        "wrong signature": forge(claims),
        "alg none": f"{b64({'alg': 'none', 'typ': 'JWT'})}.{payload}.",
        "alg none unsigned header only": b64({"alg": "none"}) + "." + payload,
        "expired": forge({**claims, "iat": now - 7200, "exp": now - 3600}, key),
        "tampered payload": f"{header}.{b64({**claims, 'sub': 'someone-else'})}.{signature}",
        "refresh token used as access": forge({**claims, "typ": "refresh"}, key),
        "garbage": "not.a.token",
    }
    for name, token in forged.items():
        resp = server.client(token).get("/v1/iam/users")
        assert resp.status == 401, name
        assert resp.json["type"] == "Unauthorized"
    for header_value in ("Basic YWRtaW46YWRtaW4=", "Bearer", "Bearer  ", good):
        resp = server.client().get("/v1/iam/users", headers={"Authorization": header_value})
        assert resp.status == 401, header_value


def test_logout_revokes_access_and_refresh(server):
    body = server.token_response("admin", ADMIN_PASSWORD).json
    client = server.client(body["access_token"])
    assert client.get("/v1/iam/users").status == 200
    assert client.post(LOGOUT).status == 204
    assert client.get("/v1/iam/users").status == 401
    resp = server.client().post(TOKEN_PATH, {"grant_type": "refresh_token",
                                             "refresh_token": body["refresh_token"]})
    oauth_error(resp, 400, "invalid_grant")


def test_refresh_grant_gives_a_working_token(server):
    body = server.token_response("admin", ADMIN_PASSWORD).json
    resp = server.client().post(TOKEN_PATH, {"grant_type": "refresh_token",
                                             "refresh_token": body["refresh_token"]})
    assert resp.status == 200
    assert server.client(resp.json["access_token"]).get("/v1/iam/users").status == 200


def test_ttl_is_bounded(server):
    resp = server.client().post(TOKEN_PATH, {"grant_type": "password", "username": "admin",
                                             "password": ADMIN_PASSWORD, "ttl": 60})
    assert resp.status == 200 and resp.json["expires_in"] == 60
    # over the maximum: lowered to it (tests/iam/test_reference_client.py has the rest)
    resp = server.client().post(TOKEN_PATH, {"grant_type": "password", "username": "admin",
                                             "password": ADMIN_PASSWORD, "ttl": 10 ** 9})
    assert resp.status == 200 and resp.json["expires_in"] == server.settings["token_ttl"]


def test_introspection(server, admin):
    resp = admin.get(INTROSPECT)
    assert resp.status == 200
    assert resp.json["user_info"]["username"] == "admin"
    assert resp.json["project_id"] is None
    assert resp.json["permissions"] == ["*.*.*"]
    assert "password_hash" not in resp.json["user_info"]


def test_disabled_user_loses_tokens(server, admin):
    uuid, name, password = make_user(admin)
    project = make_project(admin)
    from .helpers import bind
    bind(admin, uuid, "owner", project)
    token = server.login(name, password, scope=f"project:{project}")
    assert server.client(token).get(INTROSPECT).status == 200
    assert admin.put(f"/v1/iam/users/{uuid}", {"status": "DISABLED"}).status == 200
    assert server.client(token).get(INTROSPECT).status == 401
    oauth_error(server.token_response(name, password), 400, "invalid_grant")


def test_scope_needs_a_binding_in_that_project(server, admin):
    uuid, name, password = make_user(admin)
    project = make_project(admin)
    oauth_error(server.token_response(name, password, scope=f"project:{project}"), 400,
                "invalid_scope")


def test_password_never_returned_and_key_file_private(server, admin):
    uuid, name, password = make_user(admin)
    user = admin.get(f"/v1/iam/users/{uuid}").json
    assert "password" not in user and "password_hash" not in user
    assert password.encode() not in admin.get("/v1/iam/users").raw
    path = server.store.private_path(tokens.KEY_FILE)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not path.endswith(".json")


def test_admin_user_cannot_be_deleted_or_disabled(admin):
    me = admin.get("/v1/iam/users", query={"username": "admin"}).json[0]["uuid"]
    assert admin.delete(f"/v1/iam/users/{me}").status == 409
    assert admin.put(f"/v1/iam/users/{me}", {"status": "DISABLED"}).status == 409


@pytest.mark.parametrize("body,word", [
    ({"username": "x y", "password": "long-enough"}, "username"),
    ({"username": "shortpw", "password": "short"}, "password"),
    ({"username": "typeless", "password": "long-enough", "type": "robot"}, "type"),
    ({"password": "long-enough"}, "username"),
])
def test_user_validation(admin, body, word):
    resp = admin.post("/v1/iam/users", body)
    assert resp.status == 400 and word in resp.json["message"]


def test_cached_verification_still_expires_and_revokes(server):
    body = server.client().post(TOKEN_PATH, {"grant_type": "password", "username": "admin",
                                             "password": ADMIN_PASSWORD, "ttl": 2}).json
    client = server.client(body["access_token"])
    assert client.get("/v1/iam/users").status == 200     # now verified and cached
    assert client.get("/v1/iam/users").status == 200
    time.sleep(3.1)
    assert client.get("/v1/iam/users").status == 401     # the cache does not outlive exp
    fresh = server.client(server.login("admin", ADMIN_PASSWORD))
    assert fresh.get("/v1/iam/users").status == 200
    assert fresh.post(LOGOUT).status == 204
    assert fresh.get("/v1/iam/users").status == 401      # nor a logout
