"""What the reference's CLI (`exordos`) expects of IAM: token lifetimes as it sends them,
a refresh that changes the scope, change_password, and the self-service routes
(introspect, me, logout) open to any valid token."""

import time
import urllib.parse

import jwt
import pytest

from tests.apiserver import TOKEN_PATH
from tests.conftest import ADMIN_PASSWORD

from .helpers import bind, make_project, make_user

CLIENT = "/v1/iam/clients/default/actions"
INTROSPECT, ME, LOGOUT = f"{CLIENT}/introspect", f"{CLIENT}/me", f"{CLIENT}/logout/invoke"


def oauth_error(resp, error):
    assert resp.status == 400, resp
    assert set(resp.json) == {"error", "error_description"}
    assert resp.json["error"] == error
    return resp.json["error_description"]


def form_token(server, **fields):
    """The token request exactly as the reference CLI sends it: form-encoded, every value
    a string."""
    form = urllib.parse.urlencode({"grant_type": "password", "username": "admin",
                                   "password": ADMIN_PASSWORD, "scope": "", **fields})
    return server.client().post(TOKEN_PATH, raw=form.encode(),
                                content_type="application/x-www-form-urlencoded")


def lifetime(token):
    claims = jwt.decode(token, options={"verify_signature": False})
    return claims["exp"] - claims["iat"]


def test_the_reference_clis_login_gets_the_servers_maximum(server):
    resp = form_token(server, ttl="14400", refresh_ttl="86400")
    assert resp.status == 200, resp
    body = resp.json
    maximum, refresh_max = server.settings["token_ttl"], server.settings["refresh_token_ttl"]
    # lowered to the maximum, and expires_in tells the truth about what was issued
    assert body["expires_in"] == lifetime(body["access_token"]) == maximum
    assert body["refresh_expires_in"] == lifetime(body["refresh_token"]) == refresh_max
    assert server.client(body["access_token"]).get("/v1/iam/users").status == 200


# (sent, access lifetime, refresh lifetime) with the test maxima of 3600 and 86400 s
@pytest.mark.parametrize("given,access,refresh", [
    ("60", 60, 60), (60, 60, 60), ("90.5", 91, 91), (90.5, 91, 91), ("0.2", 1, 1),
    (".5", 1, 1), (1e-9, 1, 1), ("7200.0", 3600, 7200), (" 7200 ", 3600, 7200),
    ("9" * 400, 3600, 86400), (1e308, 3600, 86400)])
def test_ttl_takes_any_positive_number(server, given, access, refresh):
    assert (server.settings["token_ttl"], server.settings["refresh_token_ttl"]) == (3600, 86400)
    resp = server.client().post(TOKEN_PATH, {"grant_type": "password", "username": "admin",
                                             "password": ADMIN_PASSWORD, "ttl": given,
                                             "refresh_ttl": given})
    assert resp.status == 200, resp
    assert resp.json["expires_in"] == lifetime(resp.json["access_token"]) == access
    assert resp.json["refresh_expires_in"] == lifetime(resp.json["refresh_token"]) == refresh


@pytest.mark.parametrize("field", ["ttl", "refresh_ttl"])
@pytest.mark.parametrize("given", [0, "0", -5, "-5", "0.0", "abc", "1e3", "1_000", " ", "NaN",
                                   "inf", True, [60], {"s": 60}])
def test_bad_ttls_are_oauth_errors(server, field, given):
    resp = server.client().post(TOKEN_PATH, {"grant_type": "password", "username": "admin",
                                             "password": ADMIN_PASSWORD, field: given})
    assert field in oauth_error(resp, "invalid_request")


def test_json_the_body_reader_refuses_is_the_apis_error_not_the_grants(server):
    """NaN, Infinity and numbers past a double are no JSON the API reads (api/bodies.py):
    the request is refused before the grant sees it, with the API's error body, as the
    OpenAPI document says of the token endpoint. A string of such a number is the grant's
    to lower (test_ttl_takes_any_positive_number)."""
    raw = ('{"grant_type": "password", "username": "admin", "password": "%s", "ttl": %s}')
    for literal in ("NaN", "Infinity", "1" + "0" * 400):
        resp = server.client().post(TOKEN_PATH, raw=(raw % (ADMIN_PASSWORD, literal)).encode(),
                                    content_type="application/json")
        assert resp.status == 400, resp
        assert set(resp.json) == {"type", "code", "message"}
        assert resp.json["message"].startswith("body is not valid JSON"), resp


def test_a_refresh_token_keeps_its_own_lifetime_through_a_refresh(server):
    first = form_token(server, ttl="30", refresh_ttl="120").json
    again = server.client().post(TOKEN_PATH, {"grant_type": "refresh_token",
                                              "refresh_token": first["refresh_token"],
                                              "ttl": "45", "refresh_ttl": 200})
    assert again.status == 200, again
    assert again.json["expires_in"] == lifetime(again.json["access_token"]) == 45
    assert again.json["refresh_expires_in"] == lifetime(again.json["refresh_token"]) == 200


# ---- refresh with a scope ---------------------------------------------------------------

def refresh(server, token, **extra):
    return server.client().post(TOKEN_PATH, {"grant_type": "refresh_token",
                                             "refresh_token": token, **extra})


def test_refresh_with_a_scope_moves_the_token_to_that_project(server, admin):
    uuid, name, password = make_user(admin)
    alpha, beta, foreign = make_project(admin), make_project(admin), make_project(admin)
    bind(admin, uuid, "owner", alpha)
    bind(admin, uuid, "reader", beta)
    start = server.token_response(name, password, scope=f"project:{alpha}").json
    moved = refresh(server, start["refresh_token"], scope=f"project:{beta}")
    assert moved.status == 200, moved
    assert moved.json["scope"] == f"project:{beta}"
    seen = server.client(moved.json["access_token"]).get(INTROSPECT).json
    assert seen["project_id"] == beta
    assert "secret.*.*" not in seen["permissions"]       # a reader there, not an owner
    assert "secret.*.read" in seen["permissions"]
    # no scope (or an empty one, as form clients send it) keeps the token's own project
    for extra in ({}, {"scope": ""}):
        kept = refresh(server, moved.json["refresh_token"], **extra)
        assert kept.status == 200 and kept.json["scope"] == f"project:{beta}"
    # a project it is not bound in, an unknown project, a malformed scope: OAuth errors
    for scope, error in ((f"project:{foreign}", "invalid_scope"),
                         ("project:00000000-0000-0000-0000-0000000000ff", "invalid_scope"),
                         ("realm:everything", "invalid_scope")):
        oauth_error(refresh(server, moved.json["refresh_token"], scope=scope), error)
    # the session is one: logging out the moved token kills the first refresh token too
    assert server.client(moved.json["access_token"]).post(LOGOUT).status == 204
    oauth_error(refresh(server, start["refresh_token"], scope=f"project:{alpha}"),
                "invalid_grant")


def test_a_global_binding_lets_a_refresh_enter_any_project(server, admin):
    project = make_project(admin)
    start = server.token_response("admin", ADMIN_PASSWORD).json
    moved = refresh(server, start["refresh_token"], scope=f"project:{project}")
    assert moved.status == 200 and moved.json["scope"] == f"project:{project}"


# ---- change_password ----------------------------------------------------------------------

def change(client, user, body):
    return client.post(f"/v1/iam/users/{user}/actions/change_password/invoke", body)


def test_a_user_changes_its_own_password_with_the_old_one(server, admin):
    uuid, name, password = make_user(admin)
    bind(admin, uuid, "newcomer")
    me = server.client(server.login(name, password))
    wrong = change(me, uuid, {"old_password": "not-the-password", "new_password": "n3w-pass"})
    assert wrong.status == 403 and "old_password" in wrong.json["message"]
    missing = change(me, uuid, {"new_password": "n3w-password"})
    assert missing.status == 400 and "old_password" in missing.json["message"]
    assert server.token_response(name, password).status == 200       # nothing changed
    done = change(me, uuid, {"old_password": password, "new_password": "n3w-password"})
    assert done.status == 200, done
    assert done.json["uuid"] == uuid and "password" not in done.json
    assert "password_hash" not in done.json
    oauth_error(server.token_response(name, password), "invalid_grant")
    assert server.token_response(name, "n3w-password").status == 200


def test_an_admin_sets_anyones_password_and_nobody_else_does(server, admin):
    victim, victim_name, victim_password = make_user(admin)
    other, other_name, other_password = make_user(admin)
    project = make_project(admin)
    bind(admin, other, "owner", project)
    for token in (server.login(other_name, other_password),
                  server.login(other_name, other_password, scope=f"project:{project}")):
        refused = change(server.client(token), victim,
                         {"old_password": victim_password, "new_password": "hijacked-1"})
        assert refused.status == 403, refused
        assert "iam.user.change_password" in refused.json["message"]
    assert server.token_response(victim_name, victim_password).status == 200
    # an admin needs no old password for someone else's
    assert change(admin, victim, {"new_password": "set-by-admin"}).status == 200
    assert server.token_response(victim_name, "set-by-admin").status == 200
    # the admin's own password still needs the old one
    admin_uuid = admin.get(ME).json["user"]["uuid"]
    assert change(admin, admin_uuid, {"new_password": "whatever-1"}).status == 400
    oauth_error(server.token_response("admin", "whatever-1"), "invalid_grant")


@pytest.mark.parametrize("body,word", [
    ({}, "new_password"),
    ({"old_password": "x", "new_password": "short"}, "new_password"),
    ({"old_password": "x", "new_password": "x" * 257}, "new_password"),
    ({"old_password": "x", "new_password": 12345678}, "new_password"),
    ({"old_password": 5, "new_password": "long-enough"}, "old_password"),
    ({"old_password": "x", "new_password": "long-enough", "otp": "1"}, "otp"),
    (["new_password"], "body"),
])
def test_change_password_bad_bodies_are_400(server, admin, body, word):
    uuid, name, password = make_user(admin)
    resp = change(admin, uuid, body)
    assert resp.status == 400 and word in resp.json["message"], resp
    assert set(resp.json) == {"type", "code", "message"}
    assert server.token_response(name, password).status == 200


def test_change_password_of_nobody_is_404_and_needs_a_token(server, admin):
    ghost = "00000000-0000-0000-0000-00000000dead"
    assert change(admin, ghost, {"new_password": "long-enough"}).status == 404
    uuid, _, _ = make_user(admin)
    assert change(server.client(), uuid, {"new_password": "long-enough"}).status == 401


def test_a_lone_surrogate_password_is_no_500(server, admin):
    """A lone surrogate is no text: JSON bodies holding one are refused as unreadable
    (api/bodies.py), and a form body can only carry UTF-8, so no password ever has one."""
    uuid, name, password = make_user(admin)
    me = server.client(server.login(name, password))
    raw = ('{"old_password": "%s", "new_password": "ab\\ud800cdefgh"}' % password).encode()
    resp = me.post(f"/v1/iam/users/{uuid}/actions/change_password/invoke", raw=raw,
                   content_type="application/json")
    assert resp.status == 400 and resp.json["type"] == "ValidationError", resp
    assert server.login(name, password)        # unchanged
    wrong = server.client().post(TOKEN_PATH, raw=(
        '{"grant_type": "password", "username": "%s", "password": "\\udfff"}' % name).encode(),
        content_type="application/json")
    assert wrong.status == 400 and set(wrong.json) == {"type", "code", "message"}, wrong


# ---- self service: any valid token, no permission ------------------------------------------

def test_a_newcomer_with_no_permission_introspects_asks_who_it_is_and_logs_out(server,
                                                                               admin):
    uuid, name, password = make_user(admin)
    bind(admin, uuid, "newcomer")
    body = server.token_response(name, password).json
    me = server.client(body["access_token"])
    assert me.get("/v1/iam/projects").status == 403          # it really has nothing
    seen = me.get(INTROSPECT)
    assert seen.status == 200 and seen.json["permissions"] == []
    assert seen.json["user_info"]["uuid"] == uuid
    who = me.get(ME)
    assert who.status == 200, who
    assert who.json["user"]["uuid"] == uuid and who.json["user"]["username"] == name
    assert "password_hash" not in who.json["user"] and "password" not in who.json["user"]
    assert who.json["project_id"] is None and who.json["organization"] == []
    assert me.post(LOGOUT).status == 204
    assert me.get(INTROSPECT).status == 401
    oauth_error(refresh(server, body["refresh_token"]), "invalid_grant")


def test_me_names_the_organizations_of_the_users_projects(server, admin):
    org = admin.post("/v1/iam/organizations", {"name": f"org-{time.time_ns()}"}).json
    project = admin.post("/v1/iam/projects", {"name": "in-org", "organization": org["uuid"]}).json
    uuid, name, password = make_user(admin)
    bind(admin, uuid, "reader", project["uuid"])
    who = server.client(server.login(name, password, scope=f"project:{project['uuid']}"))
    body = who.get(ME).json
    assert [o["uuid"] for o in body["organization"]] == [org["uuid"]]
    assert body["project_id"] == project["uuid"]


def test_self_service_routes_still_need_a_valid_token(server):
    anon = server.client()
    for method, path in (("GET", INTROSPECT), ("GET", ME), ("POST", LOGOUT)):
        resp = anon.request(method, path)
        assert resp.status == 401 and resp.json["type"] == "Unauthorized"
        resp = server.client("not-a-token").request(method, path)
        assert resp.status == 401


def test_a_password_change_ends_the_other_sessions(server, admin):
    uuid, name, password = make_user(admin)
    bind(admin, uuid, "newcomer")
    current = server.token_response(name, password).json
    other = server.token_response(name, password).json
    me = server.client(current["access_token"])
    assert change(me, uuid, {"old_password": password, "new_password": "second-pw"}).status \
        == 200
    # the session that made the change goes on, and so does its refresh
    assert me.get(INTROSPECT).status == 200
    refreshed = refresh(server, current["refresh_token"])
    assert refreshed.status == 200
    assert server.client(refreshed.json["access_token"]).get(INTROSPECT).status == 200
    # every other session ends
    resp = server.client(other["access_token"]).get(INTROSPECT)
    assert resp.status == 401 and "password changed" in resp.json["message"]
    # "expired" is what makes the reference CLI log in again with its password
    assert "expired" in oauth_error(refresh(server, other["refresh_token"]), "invalid_grant")
    # an admin setting it (a PUT of password, or change_password) ends all of them
    after = server.token_response(name, "second-pw").json
    assert admin.put(f"/v1/iam/users/{uuid}", {"password": "third-pw-x"}).status == 200
    for tokens in (current, refreshed.json, after):
        assert server.client(tokens["access_token"]).get(INTROSPECT).status == 401
    latest = server.login(name, "third-pw-x")
    assert change(admin, uuid, {"new_password": "fourth-pw-x"}).status == 200
    assert server.client(latest).get(INTROSPECT).status == 401
    # an unrelated update ends nothing
    latest = server.login(name, "fourth-pw-x")
    assert admin.put(f"/v1/iam/users/{uuid}", {"first_name": "Ann"}).status == 200
    assert server.client(latest).get(INTROSPECT).status == 200
    shown = admin.get(f"/v1/iam/users/{uuid}").json
    assert "password_version" not in shown and "password_session" not in shown


def test_the_login_grant_of_the_reference_clis_dash_l(server):
    # `exordos -l admin` sends grant_type=login+password with `login`
    resp = form_token(server, grant_type="login+password", login="admin", username="")
    assert resp.status == 200, resp
    assert server.client(resp.json["access_token"]).get(ME).json["user"]["username"] == "admin"
    wrong = form_token(server, grant_type="login+password", login="admin", password="nope-nope")
    unknown = form_token(server, grant_type="login+password", login="ghost", password="nope")
    assert oauth_error(wrong, "invalid_grant") == oauth_error(unknown, "invalid_grant")
    missing = form_token(server, grant_type="login+password", username="admin")
    assert "login" in oauth_error(missing, "invalid_request")
