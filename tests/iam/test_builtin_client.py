"""The built-in login client cannot be locked (issue 25): a secret on it would refuse
every password login with 401 invalid_client, for good. Setting one is 409 and changes
nothing; a state that holds one from before is repaired at start."""

from appliance.iam import builtin, passwords
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.iam.test_lockout import admin  # noqa: F401 (fixture)

CLIENT = f"/v1/iam/clients/{builtin.DEFAULT_CLIENT}"


def test_a_secret_on_the_builtin_client_is_refused(admin, fresh_server):  # noqa: F811
    before = admin.get(CLIENT).json
    stored_before = fresh_server.store.collection("iam_clients").get(builtin.DEFAULT_CLIENT)
    for change in ({"secret": "a-long-enough-client-secret"},
                   {"secret": "a-long-enough-client-secret", "name": "renamed"}):
        resp = admin.put(CLIENT, change)
        assert resp.status == 409, resp
        assert resp.json["type"] == "Conflict"
        assert "stays public" in resp.json["message"]
    # nothing changed: the record, and every password login without a secret
    assert admin.get(CLIENT).json == before
    assert before["public"] is True
    stored = fresh_server.store.collection("iam_clients").get(builtin.DEFAULT_CLIENT)
    assert stored == stored_before and stored["secret_hash"] is None
    assert fresh_server.token_response("admin", ADMIN_PASSWORD).status == 200
    # what may change still does; a secret of null keeps it public
    assert admin.put(CLIENT, {"description": "the CLI's"}).status == 200
    assert admin.put(CLIENT, {"secret": None}).json["public"] is True
    assert fresh_server.token_response("admin", ADMIN_PASSWORD).status == 200


def test_other_clients_may_still_be_confidential(admin, fresh_server):  # noqa: F811
    made = admin.post("/v1/iam/clients", {"name": "backend"}).json
    resp = admin.put(f"/v1/iam/clients/{made['uuid']}", {"secret": "a-long-enough-secret!"})
    assert resp.status == 200 and resp.json["public"] is False
    path = f"/v1/iam/clients/{made['uuid']}/actions/get_token/invoke"
    body = {"grant_type": "password", "username": "admin", "password": ADMIN_PASSWORD}
    assert fresh_server.client().post(path, body).status == 401
    assert fresh_server.client().post(
        path, {**body, "client_secret": "a-long-enough-secret!"}).status == 200


def test_a_state_locked_before_the_rule_is_repaired_at_start(tmp_path):
    """A state from before the rule, whose built-in client got a secret: at the next start
    the client is public again and password logins pass."""
    state = str(tmp_path / "state")
    srv = ApiServer(state, ADMIN_PASSWORD).start()
    srv.store.collection("iam_clients").update(builtin.DEFAULT_CLIENT, {
        "secret_hash": passwords.hash_password("someone-elses-secret"), "public": False})
    resp = srv.token_response("admin", ADMIN_PASSWORD)
    assert resp.status == 401 and resp.json["error"] == "invalid_client"    # the lock
    srv.stop()
    srv = ApiServer(state, ADMIN_PASSWORD).start()
    try:
        assert srv.token_response("admin", ADMIN_PASSWORD).status == 200
        client = srv.store.collection("iam_clients").get(builtin.DEFAULT_CLIENT)
        assert client["public"] is True and client["secret_hash"] is None
    finally:
        srv.stop()
