"""Migration 0002: manifests and elements stored before they recorded the project they
act for get it (appliance/em/acting.py): an element linked from a repo element acts for
that repo element's project (the admin project's: the platform), its manifest with it; a
manifest of a repo element's name and version that was never installed, for the repo
element's project; anything posted to the Element Manager directly, for the platform.
Records are written straight into a real store, as an older version left them."""

import importlib

from appliance.em import acting
from state import Store

ADMIN = "00000000-0000-0000-0000-000000000000"
P = "5a1d0000-0000-4000-8000-000000000001"
migration = importlib.import_module("appliance.migrations.0002_element_acting_project")


def legacy_state(directory):
    store = Store(directory)
    manifests, elements = store.collection("em_manifests"), store.collection("em_elements")
    repo = store.collection("repo_elements")
    made = {}
    for key, project in (("project", P), ("catalog", ADMIN), ("direct", None)):
        manifest = manifests.insert({"name": key, "version": "1.0.0", "resources": {}})
        element = elements.insert({"name": key, "version": "1.0.0",
                                   "manifest": manifest["uuid"], "desired": "installed"})
        if project is not None:
            repo.insert({"name": key, "version": "1.0.0", "project_id": project,
                         "element": element["uuid"]})
        made[key] = (manifest["uuid"], element["uuid"])
    # uploaded by project P, never installed: no element links it
    manifests.insert({"name": "uploaded", "version": "2.0.0", "resources": {}})
    repo.insert({"name": "uploaded", "version": "2.0.0", "project_id": P, "element": None})
    return store, made


def test_legacy_records_get_the_project_they_act_for(tmp_path):
    store, made = legacy_state(str(tmp_path / "state"))
    try:
        assert acting.acting_project(store, store.collection("em_elements").get(
            made["project"][1])) == P          # worked out before the migration too
        migration.apply(store)
        migration.apply(store)                 # idempotent
        manifests, elements = store.collection("em_manifests"), store.collection(
            "em_elements")
        expected = {"project": P, "catalog": None, "direct": None}
        for key, (manifest, element) in made.items():
            assert elements.get(element)["project_id"] == expected[key], key
            assert manifests.get(manifest)["project_id"] == expected[key], key
        assert manifests.find_one(name="uploaded")["project_id"] == P
    finally:
        store.close()
