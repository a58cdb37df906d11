"""Nobody can lock the realm out: every change that would leave no user holding `*.*.*`
globally is 409, and changes nothing."""

import threading

import pytest

from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import bind, make_project, make_user, role_uuid

U, R, P = "/v1/iam/users", "/v1/iam/roles", "/v1/iam/permissions"
RB, PB = "/v1/iam/role_bindings", "/v1/iam/permission_bindings"


@pytest.fixture
def admin(fresh_server):
    return fresh_server.client(fresh_server.login("admin", ADMIN_PASSWORD))


def me(admin):
    return admin.get(U, query={"username": "admin"}).json[0]["uuid"]


def global_binding(admin, user, role="admin"):
    found = [b for b in admin.get(RB, query={"user": user}).json
             if b["project"] is None and b["role"].endswith(role_uuid(admin, role))]
    assert len(found) == 1, found
    return found[0]["uuid"]


def everything(admin):
    return admin.get(P, query={"name": "*.*.*"}).json[0]["uuid"]


def assert_lockout_refused(resp):
    assert resp.status == 409, resp
    body = resp.json
    assert body["type"] == "Conflict" and body["code"] == 409
    assert "*.*.*" in body["message"] and "bind another user" in body["message"]


def snapshot(admin):
    """Every IAM record that the refused changes could have touched."""
    return {path: sorted((r["uuid"], r.get("status"), r.get("updated_at"))
                         for r in admin.get(path).json) for path in (U, R, P, RB, PB)}


def second_admin(admin, fresh_server):
    uuid, username, password = make_user(admin)
    binding = bind(admin, uuid, "admin")
    return uuid, binding, fresh_server.client(fresh_server.login(username, password))


def test_the_last_admin_cannot_delete_its_own_global_binding(admin):
    before = snapshot(admin)
    assert_lockout_refused(admin.delete(f"{RB}/{global_binding(admin, me(admin))}"))
    assert snapshot(admin) == before
    assert admin.get(U).status == 200           # still an admin


def test_a_project_binding_to_the_admin_role_does_not_count(admin):
    user, _, _ = make_user(admin)
    bind(admin, user, "admin", make_project(admin))
    assert_lockout_refused(admin.delete(f"{RB}/{global_binding(admin, me(admin))}"))


def test_with_a_second_admin_one_may_go_but_not_both(admin, fresh_server):
    other, other_binding, other_client = second_admin(admin, fresh_server)
    assert admin.delete(f"{RB}/{global_binding(admin, me(admin))}").status == 204
    assert admin.get(U).status == 403           # admin gave its power away, as asked
    before = snapshot(other_client)
    assert_lockout_refused(other_client.delete(f"{RB}/{other_binding}"))
    for change in ({"status": "DISABLED"}, {"password": None}):
        assert_lockout_refused(other_client.put(f"{U}/{other}", change))
    assert_lockout_refused(other_client.delete(f"{U}/{other}"))
    assert snapshot(other_client) == before
    # changes that keep the power are fine
    assert other_client.put(f"{U}/{other}", {"password": "another-good-one"}).status == 200
    assert other_client.put(f"{U}/{other}", {"first_name": "Ada"}).status == 200


def test_the_permission_and_its_bindings_are_guarded(admin):
    before = snapshot(admin)
    assert_lockout_refused(admin.delete(f"{P}/{everything(admin)}"))
    granting = admin.get(PB, query={"permission": everything(admin)}).json
    assert len(granting) == 1
    assert_lockout_refused(admin.delete(f"{PB}/{granting[0]['uuid']}"))
    assert snapshot(admin) == before


def test_a_custom_role_granting_everything_is_guarded(admin, fresh_server):
    role = admin.post(R, {"name": "super"}).json["uuid"]
    grant = admin.post(PB, {"role": role, "permission": everything(admin)}).json["uuid"]
    user, username, password = make_user(admin)
    admin.post(RB, {"user": user, "role": role})
    su = fresh_server.client(fresh_server.login(username, password))
    assert su.delete(f"{RB}/{global_binding(admin, me(admin))}").status == 204
    before = snapshot(su)
    assert_lockout_refused(su.delete(f"{R}/{role}"))
    assert_lockout_refused(su.delete(f"{PB}/{grant}"))
    assert_lockout_refused(su.delete(f"{P}/{everything(su)}"))
    assert snapshot(su) == before
    # once another holder exists again, the custom role may go
    bind(su, me(su), "admin")
    assert su.delete(f"{R}/{role}").status == 204
    assert admin.get(U).status == 200


def test_unrelated_iam_changes_pass(admin):
    user, _, _ = make_user(admin)
    reader = bind(admin, user, "reader")
    assert admin.delete(f"{RB}/{reader}").status == 204
    assert admin.put(f"{U}/{user}", {"status": "DISABLED"}).status == 200
    assert admin.delete(f"{U}/{user}").status == 204
    role = admin.post(R, {"name": "spare"}).json["uuid"]
    assert admin.delete(f"{R}/{role}").status == 204


def test_two_admins_removing_each_other_at_once_leave_one(admin, fresh_server):
    admin_uuid = me(admin)
    for _ in range(3):
        other, other_binding, other_client = second_admin(admin, fresh_server)
        admins_binding = global_binding(admin, admin_uuid)
        answers = {}
        barrier = threading.Barrier(2)

        def remove(binding, client):
            barrier.wait()
            answers[binding] = client.delete(f"{RB}/{binding}").status

        threads = [threading.Thread(target=remove, args=(admins_binding, other_client)),
                   threading.Thread(target=remove, args=(other_binding, admin))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # one goes; the other is refused: 409 by the guard when both passed authentication
        # before either deleted, 403 when the first delete landed before the second
        # request was authenticated
        assert sorted(answers.values()) in ([204, 403], [204, 409]), answers
        if answers[admins_binding] == 204:      # the other one won: it hands the power back
            bind(other_client, admin_uuid, "admin")
            assert other_client.delete(f"{RB}/{other_binding}").status == 204
        assert admin.get(U).status == 200
