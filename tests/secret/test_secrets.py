"""Opaque secrets (spec 2.2, 3.1, 4.2) against the API and the running delivery daemon."""

import os
import shutil
import stat
import uuid

import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from tests.iam.helpers import bind, make_project, make_user

from .conftest import remember, wait_for

S = "/v1/secret/secrets"


def data_file(server, secret_uuid, folder="secrets"):
    return os.path.join(server.settings["state_dir"], "data-plane", "secret", folder,
                        secret_uuid)


def delivered(server, secret_uuid, folder="secrets"):
    try:
        with open(data_file(server, secret_uuid, folder)) as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def status(admin, secret_uuid):
    return admin.get(f"{S}/{secret_uuid}").json["status"]


def wait_status(admin, secret_uuid, wanted, timeout=10):
    return wait_for(lambda: status(admin, secret_uuid) == wanted, timeout)


def create(admin, **fields):
    for key in ("value", "default_value"):
        if fields.get(key):
            remember(fields[key])
    body = {"name": f"s-{uuid.uuid4().hex[:10]}", "project_id": ADMIN_PROJECT,
            "constructor": {"kind": "plain"}, **fields}
    resp = admin.post(S, body)
    assert resp.status == 201, resp
    return resp.json


def settle(admin):
    """A secret created after the others is ACTIVE once the daemon has passed over
    everything before it: then 'stays NEW' can be asserted, not guessed."""
    marker = create(admin, value=remember(f"marker-{uuid.uuid4().hex}"))
    wait_status(admin, marker["uuid"], "ACTIVE")


@pytest.fixture(autouse=True)
def running(delivery):
    return delivery


def test_create_with_value_is_delivered(server, admin):
    value = remember(f"v-{uuid.uuid4().hex}")
    secret = create(admin, value=value)
    assert secret["status"] == "NEW"
    assert secret["value"] == value and "default_value" not in secret
    assert set(secret) >= {"uuid", "name", "project_id", "status", "constructor", "value"}
    wait_status(admin, secret["uuid"], "ACTIVE")
    assert delivered(server, secret["uuid"]) == value
    assert stat.S_IMODE(os.stat(data_file(server, secret["uuid"])).st_mode) == 0o600
    plane = os.path.join(server.settings["state_dir"], "data-plane")
    for directory in (plane, os.path.join(plane, "secret"), os.path.dirname(
            data_file(server, secret["uuid"]))):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700, directory


def test_create_with_default_only_delivers_the_default(server, admin):
    default = remember(f"d-{uuid.uuid4().hex}")
    secret = create(admin, default_value=default)
    assert "value" not in secret and secret["default_value"] == default
    wait_status(admin, secret["uuid"], "ACTIVE")
    assert delivered(server, secret["uuid"]) == default


def test_create_with_neither_stays_new_and_delivers_nothing(server, admin):
    secret = create(admin)
    assert "value" not in secret and "default_value" not in secret
    settle(admin)
    assert status(admin, secret["uuid"]) == "NEW"
    assert delivered(server, secret["uuid"]) is None


def test_rotation_returns_to_new_then_delivers_the_new_value(server, admin):
    secret = create(admin, value=remember(f"old-{uuid.uuid4().hex}"))
    wait_status(admin, secret["uuid"], "ACTIVE")
    new_value = remember(f"new-{uuid.uuid4().hex}")
    resp = admin.put(f"{S}/{secret['uuid']}", {"value": new_value})
    assert resp.status == 200 and resp.json["status"] == "NEW"
    wait_for(lambda: delivered(server, secret["uuid"]) == new_value)
    wait_status(admin, secret["uuid"], "ACTIVE")


def test_clear_without_default_withdraws_the_value(server, admin):
    secret = create(admin, value=remember(f"c-{uuid.uuid4().hex}"))
    wait_status(admin, secret["uuid"], "ACTIVE")
    resp = admin.put(f"{S}/{secret['uuid']}", {"value": None})
    assert resp.status == 200 and resp.json["status"] == "NEW" and "value" not in resp.json
    wait_for(lambda: delivered(server, secret["uuid"]) is None)
    settle(admin)
    assert status(admin, secret["uuid"]) == "NEW"


def test_clear_with_default_delivers_the_default(server, admin):
    default = remember(f"def-{uuid.uuid4().hex}")
    secret = create(admin, value=remember(f"val-{uuid.uuid4().hex}"), default_value=default)
    wait_status(admin, secret["uuid"], "ACTIVE")
    resp = admin.put(f"{S}/{secret['uuid']}", {"value": None})
    assert resp.json["status"] == "NEW" and resp.json["default_value"] == default
    wait_for(lambda: delivered(server, secret["uuid"]) == default)
    wait_status(admin, secret["uuid"], "ACTIVE")


def test_every_put_returns_to_new(server, admin):
    secret = create(admin, value=remember(f"p-{uuid.uuid4().hex}"))
    wait_status(admin, secret["uuid"], "ACTIVE")
    resp = admin.put(f"{S}/{secret['uuid']}", {"description": "only the description"})
    assert resp.json["status"] == "NEW"
    wait_status(admin, secret["uuid"], "ACTIVE")


def test_delivery_failure_is_error_then_repair_is_active(server, admin):
    folder = os.path.join(server.settings["state_dir"], "data-plane", "secret", "secrets")
    saved = folder + ".saved"
    settle(admin)
    shutil.move(folder, saved)
    with open(folder, "w") as blocker:      # a file where the folder must be
        blocker.write("not a directory")
    try:
        secret = create(admin, value=remember(f"e-{uuid.uuid4().hex}"))
        wait_status(admin, secret["uuid"], "ERROR")
        reason = admin.get(f"{S}/{secret['uuid']}").json["status_reason"]
        assert "data plane" in reason and secret["value"] not in reason
    finally:
        os.unlink(folder)
        shutil.move(saved, folder)
    # no intervention: the daemon retries with back-off and succeeds
    wait_status(admin, secret["uuid"], "ACTIVE", timeout=15)
    assert delivered(server, secret["uuid"]) == secret["value"]
    assert admin.get(f"{S}/{secret['uuid']}").json["status_reason"] is None


def test_deleting_a_secret_withdraws_its_file(server, admin):
    secret = create(admin, value=remember(f"del-{uuid.uuid4().hex}"))
    wait_status(admin, secret["uuid"], "ACTIVE")
    assert admin.delete(f"{S}/{secret['uuid']}").status == 204
    wait_for(lambda: delivered(server, secret["uuid"]) is None)


@pytest.mark.parametrize("field", ["value", "default_value"])
def test_length_limits(admin, field):
    ok = create(admin, **{field: "x" * 10240})
    assert ok[field] == "x" * 10240
    resp = admin.post(S, {"name": f"too-long-{field}", "project_id": ADMIN_PROJECT,
                          "constructor": {"kind": "plain"}, field: "x" * 10241})
    assert resp.status == 400 and field in resp.json["message"]
    assert "10240" in resp.json["message"]
    resp = admin.put(f"{S}/{ok['uuid']}", {field: "y" * 10241})
    assert resp.status == 400
    assert admin.get(f"{S}/{ok['uuid']}").json[field] == "x" * 10240


def test_constructor_kind_must_be_plain(admin):
    resp = admin.post(S, {"name": "bad-kind", "project_id": ADMIN_PROJECT,
                          "constructor": {"kind": "vault"}})
    assert resp.status == 400
    assert "constructor.kind" in resp.json["message"] and "plain" in resp.json["message"]
    # null is "not given" (docs/validation.md, "null"): the default, plain
    resp = admin.post(S, {"name": "null-constructor", "project_id": ADMIN_PROJECT,
                          "constructor": None})
    assert resp.status == 201 and resp.json["constructor"] == {"kind": "plain"}
    # left out, it is plain: the reference CLI's `secret secrets add` sends none
    resp = admin.post(S, {"name": "no-constructor", "project_id": ADMIN_PROJECT,
                          "value": "v"})
    assert resp.status == 201 and resp.json["constructor"] == {"kind": "plain"}


def test_unknown_project_is_400(admin):
    resp = admin.post(S, {"name": "orphan", "project_id": str(uuid.uuid4()),
                          "constructor": {"kind": "plain"}})
    assert resp.status == 400 and "project" in resp.json["message"]


def test_read_needs_secret_secret_read(server, admin):
    secret = create(admin, value=remember(f"r-{uuid.uuid4().hex}"))
    project = make_project(admin)
    user, name, password = make_user(admin)
    role = admin.post("/v1/iam/roles", {"name": f"writer-{uuid.uuid4().hex[:6]}"}).json
    perm = admin.post("/v1/iam/permissions", {"name": "secret.secret.create"}).json
    if perm.get("uuid") is None:
        perm = admin.get("/v1/iam/permissions", query={"name": "secret.secret.create"}).json[0]
    admin.post("/v1/iam/permission_bindings", {"role": role["uuid"], "permission": perm["uuid"]})
    admin.post("/v1/iam/role_bindings", {"user": user, "role": role["uuid"]})
    writer = server.client(server.login(name, password))
    assert writer.get(f"{S}/{secret['uuid']}").status == 403
    assert writer.get(S).status == 403
    assert secret["value"].encode() not in writer.get(f"{S}/{secret['uuid']}").raw
    bind(admin, user, "reader", project)
    reader = server.client(server.login(name, password, scope=f"project:{project}"))
    assert reader.get(f"{S}/{secret['uuid']}").status == 404     # another project's


def test_values_are_encrypted_at_rest(server, admin):
    value = remember(f"at-rest-{uuid.uuid4().hex}")
    create(admin, value=value, default_value=remember(f"at-rest-default-{uuid.uuid4().hex}"))
    for path in server.store.files_of("secret_secrets"):     # the base and its journal
        with open(path) as f:
            content = f.read()
        assert value not in content and "at-rest-default" not in content
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_restart_mid_delivery_converges(server, admin, delivery):
    values = {}
    delivery.kill()
    for i in range(30):
        s = create(admin, value=remember(f"k{i}-{uuid.uuid4().hex}"))
        values[s["uuid"]] = s["value"]
    delivery.start()
    # kill it again while it works through them, then start it once more
    wait_for(lambda: any(delivered(server, u) for u in values), timeout=10, interval=0.001)
    delivery.kill()
    delivery.start()
    for u, v in values.items():
        wait_status(admin, u, "ACTIVE")
        assert delivered(server, u) == v
