"""The version seed (appliance/sqldb/versions.py), run by appliance.bootstrap at every start
(`appliance up`) and at first boot."""

import uuid

from appliance import config
from appliance.bootstrap import bootstrap
from appliance.sqldb.versions import SEED_UUID, seed
from state import Store


def settings(state_dir, **overrides):
    return config.load(environ={}, overrides={"state_dir": str(state_dir),
                                              "admin_password": "seed-test-password",
                                              **overrides})


def test_the_seed_is_the_contracts_version(tmp_path):
    assert SEED_UUID == str(uuid.uuid5(uuid.NAMESPACE_URL, "appliance:sqldb:version:15"))
    bootstrap(settings(tmp_path, sqldb_image="file:///images/pg15.qcow2"))
    store = Store(str(tmp_path))
    try:
        version = store.collection("sqldb_versions").get(SEED_UUID)
        assert (version["name"], version["major"], version["image"], version["deprecated"]) \
            == ("15", 15, "file:///images/pg15.qcow2", False)
        assert version["project_id"] == "00000000-0000-0000-0000-000000000000"
    finally:
        store.close()


def test_the_seed_is_idempotent_and_keeps_the_admins_changes(tmp_path):
    bootstrap(settings(tmp_path))
    store = Store(str(tmp_path))
    try:
        versions = store.collection("sqldb_versions")
        assert versions.get(SEED_UUID)["image"] == ""
        versions.update(SEED_UUID, {"deprecated": True, "image": "mine"})
        revision = versions.get(SEED_UUID)["revision"]
        seed(store, {"sqldb_image": "other"})
    finally:
        store.close()
    bootstrap(settings(tmp_path, sqldb_image="other"))
    store = Store(str(tmp_path))
    try:
        versions = store.collection("sqldb_versions")
        assert len(versions.records()) == 1
        kept = versions.get(SEED_UUID)
        assert (kept["revision"], kept["image"], kept["deprecated"]) == (revision, "mine", True)
    finally:
        store.close()


def test_a_15_made_by_hand_first_is_left_alone(tmp_path):
    store = Store(str(tmp_path))
    try:
        store.collection("sqldb_versions", unique=[("name",)]).insert(
            {"name": "15", "major": 15, "image": "", "deprecated": False})
        seed(store, {})
        assert [v["name"] for v in store.collection("sqldb_versions").records()] == ["15"]
        assert store.collection("sqldb_versions").get(SEED_UUID) is None
    finally:
        store.close()
