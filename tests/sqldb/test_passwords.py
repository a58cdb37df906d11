"""User passwords: kept only as SCRAM-SHA-256 verifiers, never returned (not even to an
admin), never written in clear anywhere under the state directory."""

import os

from appliance.sqldb import scram
from tests.compute.conftest import created, refused
from tests.conftest import SECRET_VALUES

from .helpers import make_instance, users

FIRST, SECOND = "first-Clear-pässword", "second-Clear-password"


def state_files(state_dir):
    for root, _, files in os.walk(state_dir):
        for name in files:
            yield os.path.join(root, name)


def clear_in_state(state_dir, password):
    needles = {password.encode(), password.encode("utf-16-le"),
               password.encode("unicode_escape"), password.encode("ascii", "replace")}
    found = []
    for path in state_files(state_dir):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if any(n in data for n in needles):
            found.append(path)
    return found


def test_no_clear_password_in_the_state_and_none_returned(server, admin):
    SECRET_VALUES.update({FIRST, SECOND})
    instance = make_instance(admin)
    user = created(admin.post(users(instance), {"name": "keeper", "password": FIRST}))
    path = f"{users(instance)}/{user['uuid']}"
    assert admin.put(path, {"password": SECOND}).status == 200
    server.store.close()        # journals flushed and compacted as they will be on disk
    state = server.settings["state_dir"]
    assert clear_in_state(state, FIRST) == [] and clear_in_state(state, SECOND) == []
    record = server.store.collection("sqldb_users").get(user["uuid"])
    assert "password" not in record
    assert scram.verifies(SECOND, record["password_hash"])
    assert not scram.verifies(FIRST, record["password_hash"])
    for shown in (user, admin.get(path).json, admin.get(users(instance)).json[0],
                  admin.get(f"/api/dbaas/v1/types/postgres/instances/{instance['uuid']}"
                            f"/users/{user['uuid']}").json):
        assert "password" not in shown and "password_hash" not in shown
        assert not any("SCRAM" in str(v) for v in shown.values())
    refused(admin.get(users(instance), query={"password_hash": "x"}), 400)
    refused(admin.get(users(instance), query={"password": "x"}), 400)
    refused(admin.get(path, query={"fields": "password_hash"}), 400)
    refused(admin.put(path, {"password_hash": record["password_hash"]}), 400)
