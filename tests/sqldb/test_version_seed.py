"""The version seed (appliance/sqldb/versions.py), run by appliance.bootstrap at every start
(`appliance up`) and at first boot."""

import uuid

import pytest

from appliance import config
from appliance.bootstrap import bootstrap
from appliance.sqldb import pg
from appliance.sqldb.versions import (NODE_IMAGE_MAJOR, SEED_MAJOR, SEED_NAME, SEED_UUID,
                                      seed, seed_major, seed_uuid)
from state import Store


def settings(state_dir, **overrides):
    return config.load(environ={}, overrides={"state_dir": str(state_dir),
                                              "admin_password": "seed-test-password",
                                              **overrides})


def test_the_seed_is_the_highest_major_installed_here():
    """15 on the Debian 12 host that runs the tests, 17 in the Debian 13 images (checked
    in the booted image by tests/image/test_guest_sqldb.py)."""
    installed = pg.installed_majors()
    assert SEED_MAJOR == (installed[-1] if installed else NODE_IMAGE_MAJOR)
    assert SEED_NAME == str(SEED_MAJOR)
    assert seed_major([15]) == 15 and seed_major([15, 17]) == 17 and seed_major([]) == 17
    for major in (15, 17):
        assert seed_uuid(major) == str(uuid.uuid5(uuid.NAMESPACE_URL,
                                                  f"appliance:sqldb:version:{major}"))


def test_the_seed_is_the_contracts_version(tmp_path):
    if SEED_MAJOR != 15:
        pytest.skip(f"this machine carries PostgreSQL {SEED_MAJOR}, the test's host 15")
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
        seed(store, {}, installed=[15])
        assert [v["name"] for v in store.collection("sqldb_versions").records()] == ["15"]
        assert store.collection("sqldb_versions").get(SEED_UUID) is None
    finally:
        store.close()


def test_an_upgraded_machine_offers_its_major_and_deprecates_the_one_it_lost(tmp_path):
    """A Debian 12 appliance's state (the seed "15") under a Debian 13 root (17 only): the
    seed adds "17" and deprecates "15" once (instances of 15 keep it; new ones cannot pick
    it); an administrator who takes the deprecation back is not overruled at the next
    start, and nothing else changes."""
    store = Store(str(tmp_path))
    try:
        versions = store.collection("sqldb_versions")
        seed(store, {}, installed=[15])
        assert [(v["name"], v["deprecated"]) for v in versions.records()] == [("15", False)]
        seed(store, {"sqldb_image": "file:///images/node.qcow2"}, installed=[17])
        old, new = versions.get(seed_uuid(15)), versions.get(seed_uuid(17))
        assert (new["name"], new["major"], new["deprecated"], new["image"]) == (
            "17", 17, False, "file:///images/node.qcow2")
        assert old["deprecated"] is True and old["major"] == 15
        assert "Upgrading PostgreSQL" in old["description"]
        versions.update(old["uuid"], {"deprecated": False})
        revisions = {v["uuid"]: v["revision"] for v in versions.records()}
        seed(store, {}, installed=[17])
        assert {v["uuid"]: v["revision"] for v in versions.records()} == revisions
        # a machine that carries both keeps offering both
        seed(store, {}, installed=[15, 17])
        assert {v["uuid"]: v["revision"] for v in versions.records()} == revisions
    finally:
        store.close()


def test_both_majors_installed_leave_the_earlier_seed_offered(tmp_path):
    store = Store(str(tmp_path))
    try:
        seed(store, {}, installed=[15])
        seed(store, {}, installed=[15, 17])
        assert sorted((v["name"], v["deprecated"]) for v in
                      store.collection("sqldb_versions").records()) == [("15", False),
                                                                         ("17", False)]
    finally:
        store.close()
