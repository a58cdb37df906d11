"""A manifest linking secrets to a password and to values-store variables; a profile
switch re-renders everything linked (issue 5, first 'must show')."""

import uuid

from tests.secret.conftest import remember, wait_for

from .conftest import ADMIN_PROJECT, element, install, wait_element

P = ADMIN_PROJECT


def profiles(admin):
    return {p["name"]: p["uuid"] for p in admin.get("/v1/vs/profiles").json}


def activate(admin, name):
    resp = admin.post(f"/v1/vs/profiles/{profiles(admin)[name]}/actions/activate/invoke", {})
    assert resp.status == 200, resp


def owned(admin, elem, key):
    slot = elem["resources"][key]
    return admin.get(f"{slot['collection']}/{slot['uuid']}").json


def test_profile_switch_rerenders_linked_resources(admin):
    ids = profiles(admin)
    activate(admin, "develop")
    manifest = {
        "name": "sized", "version": "1.0.0",
        "resources": {
            "$core.secret.passwords": {"admin_pw": {"name": "sized-admin-pw", "project_id": P}},
            "$core.vs.variables": {
                "replicas": {"name": "sized-replicas", "project_id": P, "setter": {
                    "kind": "profile", "fallback_strategy": "ignore",
                    "profiles": [{"profile": ids["develop"], "value": 1},
                                 {"profile": ids["small"], "value": 2},
                                 {"profile": ids["large"], "value": 5}]}},
                "endpoint": {"name": "sized-endpoint", "project_id": P,
                             "setter": {"kind": "selector", "selector_strategy": "latest"}},
            },
            "$core.vs.values": {
                "endpoint_value": {"name": "sized-endpoint-1", "project_id": P,
                                   "variable": "$sized.vs.variables.$endpoint:uuid",
                                   "value": "10.20.0.5"}},
            "$core.secret.secrets": {
                "admin_pw_copy": {"name": "sized-admin-pw-copy", "project_id": P,
                                  "constructor": {"kind": "plain"},
                                  "default_value": "$sized.secret.passwords.$admin_pw:value"},
                "config": {"name": "sized-config", "project_id": P,
                           "constructor": {"kind": "plain"},
                           "default_value": 'f"replicas={$sized.vs.variables.$replicas:value} '
                                            'endpoint={$sized.vs.variables.$endpoint:value}"'},
            },
        }}
    install(admin, manifest)
    elem = wait_element(admin, "sized")
    password = owned(admin, elem, "secret.passwords.$admin_pw")["value"]
    remember(password)
    assert owned(admin, elem, "secret.secrets.$admin_pw_copy")["default_value"] == password
    assert owned(admin, elem, "vs.variables.$replicas")["value"] == 1
    assert owned(admin, elem, "vs.variables.$endpoint")["value"] == "10.20.0.5"
    config = "secret.secrets.$config"
    assert owned(admin, elem, config)["default_value"] == "replicas=1 endpoint=10.20.0.5"

    activate(admin, "large")
    assert owned(admin, elem, "vs.variables.$replicas")["value"] == 5
    wait_for(lambda: owned(admin, elem, config)["default_value"] ==
             "replicas=5 endpoint=10.20.0.5", timeout=5)
    activate(admin, "small")
    wait_for(lambda: owned(admin, elem, config)["default_value"] ==
             "replicas=2 endpoint=10.20.0.5", timeout=5)
    # a profile the variable does not list (fallback ignore): no value, the consumer waits
    activate(admin, "medium")
    wait_for(lambda: element(admin, "sized")["status"] == "IN_PROGRESS", timeout=5)
    activate(admin, "develop")
    wait_element(admin, "sized")
    assert owned(admin, elem, config)["default_value"] == "replicas=1 endpoint=10.20.0.5"
    # a new value bound to the selector variable: the latest wins, and is linked on
    new_value = admin.post("/v1/vs/values", {
        "name": f"sized-endpoint-{uuid.uuid4().hex[:6]}", "project_id": P,
        "variable": elem["resources"]["vs.variables.$endpoint"]["uuid"], "value": "10.20.0.9"})
    assert new_value.status == 201, new_value
    wait_for(lambda: owned(admin, elem, config)["default_value"] ==
             "replicas=1 endpoint=10.20.0.9", timeout=5)
    # a free value, selected: it binds and becomes the value
    endpoint = elem["resources"]["vs.variables.$endpoint"]["uuid"]
    free = admin.post("/v1/vs/values", {"name": f"spare-{uuid.uuid4().hex[:6]}",
                                        "project_id": P, "value": "10.20.0.7"})
    assert free.status == 201 and free.json["variable"] is None, free
    chosen = admin.post(f"/v1/vs/variables/{endpoint}/actions/select_value/invoke",
                        {"value": free.json["uuid"]})
    assert chosen.status == 200 and chosen.json["value"] == "10.20.0.7", chosen
    wait_for(lambda: owned(admin, elem, config)["default_value"] ==
             "replicas=1 endpoint=10.20.0.7", timeout=5)
    # an older value, selected, wins over the latest; released, the latest (the value
    # just bound, created last) applies again
    older = elem["resources"]["vs.values.$endpoint_value"]["uuid"]
    assert admin.post(f"/v1/vs/variables/{endpoint}/actions/select_value/invoke",
                      {"value": older}).json["value"] == "10.20.0.5"
    wait_for(lambda: owned(admin, elem, config)["default_value"] ==
             "replicas=1 endpoint=10.20.0.5", timeout=5)
    released = admin.post(f"/v1/vs/variables/{endpoint}/actions/release_value/invoke")
    assert released.status == 200 and released.json["value"] == "10.20.0.7", released
    wait_for(lambda: owned(admin, elem, config)["default_value"] ==
             "replicas=1 endpoint=10.20.0.7", timeout=5)
    # the operator's selection is not the manifest's to undo: the element stays ACTIVE
    assert wait_element(admin, "sized")["status"] == "ACTIVE"
