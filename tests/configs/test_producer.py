"""The configs producer (`for_node`) over a real API's store: items, rendering, link
tracking through the item hash, waiting for a missing link."""

import uuid

import pytest

from appliance.agent.protocol import item_hash, target_uuid
from appliance.agent.targets import View
from appliance.configs.targets import for_node
from tests.compute.conftest import created

from .helpers import C, PW, config_body, hw_node, node_set, password, pw_link


@pytest.fixture(scope="module")
def nodes(admin):
    return [hw_node(admin) for _ in range(2)]


def items_of(server, node, config_uuid):
    return [i for i in for_node(View(server.store), node) if i["master"] == config_uuid]


def test_a_linked_password_is_rendered_and_its_change_changes_the_hash(server, admin, nodes):
    pw = password(admin)
    body = {"kind": "template", "template": "user=app\npassword={{ pw }}\n",
            "variables": {"pw": pw_link(pw["uuid"])}}
    config = created(admin.post(C, config_body(nodes[0]["uuid"], body=body, mode="0600",
                                               owner="app", group="app")))
    [item] = items_of(server, nodes[0], config["uuid"])
    assert item["uuid"] == target_uuid(nodes[0]["uuid"], "config", config["uuid"])
    assert item["kind"] == "config" and item["master_kind"] == "config_configs"
    assert item["value"] == {"path": config["path"], "owner": "app", "group": "app",
                             "mode": "0600", "on_change": {"kind": "no_action"},
                             "content": f"user=app\npassword={pw['value']}\n"}
    assert items_of(server, nodes[1], config["uuid"]) == []
    before = item_hash(item)
    resp = admin.post(f"{PW}/{pw['uuid']}/actions/regenerate/invoke", {})
    assert resp.status == 200, resp
    [after] = items_of(server, nodes[0], config["uuid"])
    assert after["value"]["content"] == f"user=app\npassword={resp.json['value']}\n"
    assert item_hash(after) != before


def test_a_missing_link_waits_then_renders(server, admin, nodes):
    missing = str(uuid.uuid4())
    body = {"kind": "template", "template": "{{ pw }}", "variables": {"pw": pw_link(missing)}}
    config = created(admin.post(C, config_body(nodes[0]["uuid"], body=body)))
    [item] = items_of(server, nodes[0], config["uuid"])
    assert item["value"] is None
    assert item["unavailable"] == f"waiting for {pw_link(missing)}"
    pw = password(admin, uuid=missing)
    [item] = items_of(server, nodes[0], config["uuid"])
    assert item["value"]["content"] == pw["value"] and "unavailable" not in item


def test_fields_and_values_store_links(server, admin, nodes):
    variable = created(admin.post("/v1/vs/variables", {
        "name": f"v{uuid.uuid4().hex[:8]}", "project_id": nodes[0]["project_id"],
        "setter": {"kind": "selector"}}))
    body = {"kind": "template", "template": "{{ name }} {{ v }} {{ n }} {{ b }} {{ z }}",
            "variables": {"name": f"$core.compute.nodes.${nodes[1]['uuid']}:name",
                          "v": f"$core.vs.variables.${variable['uuid']}:value",
                          "n": 3, "b": True, "z": None}}
    config = created(admin.post(C, config_body(nodes[0]["uuid"], body=body)))
    [item] = items_of(server, nodes[0], config["uuid"])
    assert item["unavailable"].endswith("(no value)")
    created(admin.post("/v1/vs/values", {"name": "x", "project_id": nodes[0]["project_id"],
                                         "variable": variable["uuid"], "value": "blue"}))
    [item] = items_of(server, nodes[0], config["uuid"])
    assert item["value"]["content"] == f"{nodes[1]['name']} blue 3 true "


def test_set_and_list_targets_fan_out(server, admin, nodes):
    s = node_set(admin)
    member = {**nodes[1], "node_set": f"/v1/compute/sets/{s['uuid']}"}
    by_set = created(admin.post(C, config_body(nodes[0]["uuid"], target={
        "kind": "node_set", "node_set": s["uuid"]})))
    by_list = created(admin.post(C, config_body(nodes[0]["uuid"], target={
        "kind": "nodes", "nodes": [n["uuid"] for n in nodes]})))
    assert len(items_of(server, member, by_set["uuid"])) == 1
    assert items_of(server, nodes[0], by_set["uuid"]) == []
    assert all(len(items_of(server, n, by_list["uuid"])) == 1 for n in nodes)
    admin.delete(f"{C}/{by_list['uuid']}")
    assert items_of(server, nodes[0], by_list["uuid"]) == []
