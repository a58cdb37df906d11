"""The principal each access token stands for is cached (appliance/iam/auth.py): every
change that decides it still takes effect on the very next request. Each test uses the
token twice first, so that the second request is answered from the cache, then changes
one thing and expects the next request to see it."""

import jwt

from state import Store
from tests.apiserver import TOKEN_PATH

from .helpers import bind, make_project, make_user

INTROSPECT = "/v1/iam/clients/default/actions/introspect"
LOGOUT = "/v1/iam/clients/default/actions/logout/invoke"
USERS = "/v1/iam/users"


def cached_client(server, admin, scope=None, role=None):
    """(a client of a new user's token, already answered from the cache, its uuid)"""
    uuid, name, password = make_user(admin)
    if role is not None:
        bind(admin, uuid, role, scope)
    token = server.login(name, password, scope=f"project:{scope}" if scope else "")
    client = server.client(token)
    for _ in range(2):
        assert client.get(INTROSPECT).status == 200
    return client, uuid, token


def test_logout_takes_effect_on_the_next_request(server, admin):
    client, _, _ = cached_client(server, admin, role="admin")
    assert client.get(USERS).status == 200
    assert client.post(LOGOUT).status == 204
    resp = client.get(USERS)
    assert resp.status == 401 and resp.json["message"] == "token revoked"


def test_a_revocation_written_by_another_process_takes_effect_at_once(server, admin):
    client, uuid, token = cached_client(server, admin, role="admin")
    assert client.get(USERS).status == 200
    claims = jwt.decode(token, options={"verify_signature": False})
    other = Store(server.settings["state_dir"])     # another writer of the same files
    try:
        other.collection("iam_revoked_sessions").insert(
            {"sid": claims["sid"], "user": uuid, "expires_at": "2999-01-01T00:00:00Z"})
    finally:
        other.close()
    resp = client.get(USERS)
    assert resp.status == 401 and resp.json["message"] == "token revoked"
    assert admin.get(USERS).status == 200       # another session is not revoked


def test_a_role_binding_added_or_deleted_takes_effect_at_once(server, admin):
    client, uuid, _ = cached_client(server, admin)
    assert client.get(USERS).status == 403
    assert client.get(INTROSPECT).json["permissions"] == []
    binding = bind(admin, uuid, "admin")
    assert client.get(USERS).status == 200
    assert client.get(INTROSPECT).json["permissions"] == ["*.*.*"]
    assert admin.delete(f"/v1/iam/role_bindings/{binding}").status == 204
    resp = client.get(USERS)
    assert resp.status == 403 and "permission" in resp.json["message"]
    assert client.get(INTROSPECT).json["permissions"] == []


def test_a_deleted_user_loses_its_token_at_once(server, admin):
    client, uuid, _ = cached_client(server, admin)
    assert admin.delete(f"/v1/iam/users/{uuid}").status == 204
    resp = client.get(INTROSPECT)
    assert resp.status == 401 and "unknown or disabled user" in resp.json["message"]


def test_a_disabled_user_and_a_changed_password_take_effect_at_once(server, admin):
    client, uuid, _ = cached_client(server, admin)
    assert admin.put(f"{USERS}/{uuid}", {"password": "another-good-password"}).status == 200
    resp = client.get(INTROSPECT)
    assert resp.status == 401 and "password changed" in resp.json["message"]
    client, uuid, _ = cached_client(server, admin)
    assert admin.put(f"{USERS}/{uuid}", {"status": "DISABLED"}).status == 200
    assert client.get(INTROSPECT).status == 401
    assert admin.put(f"{USERS}/{uuid}", {"status": "ACTIVE"}).status == 200
    assert client.get(INTROSPECT).status == 200     # worked out again, not remembered


def test_a_deleted_project_ends_the_tokens_scoped_to_it_at_once(server, admin):
    project = make_project(admin)
    client, uuid, _ = cached_client(server, admin, scope=project, role="owner")
    assert client.get(INTROSPECT).json["project_id"] == project
    bindings = admin.get("/v1/iam/role_bindings", query={"user": uuid}).json
    for b in bindings:
        assert admin.delete(f"/v1/iam/role_bindings/{b['uuid']}").status == 204
    assert admin.delete(f"/v1/iam/projects/{project}").status == 204
    resp = client.get(INTROSPECT)
    assert resp.status == 401 and "no longer exists" in resp.json["message"]


def test_a_token_of_a_refresh_is_its_own_entry(server, admin):
    """Two tokens of one session: the refreshed one works, and a logout ends both."""
    uuid, name, password = make_user(admin)
    body = server.token_response(name, password).json
    first = server.client(body["access_token"])
    assert first.get(INTROSPECT).status == 200
    resp = server.client().post(TOKEN_PATH, {"grant_type": "refresh_token",
                                             "refresh_token": body["refresh_token"]})
    second = server.client(resp.json["access_token"])
    assert second.get(INTROSPECT).status == 200
    assert first.post(LOGOUT).status == 204
    assert first.get(INTROSPECT).status == 401
    assert second.get(INTROSPECT).status == 401
