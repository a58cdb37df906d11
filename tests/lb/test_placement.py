"""Where an LB runs (appliance/lb/placement.py), over a bare store."""

import pytest

from appliance.agent.credentials import issue_credential
from appliance.lb import placement
from state import Store

from .helpers import register_appliance

ADMIN = "00000000-0000-0000-0000-000000000000"
PROJECT = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "state"))
    yield s
    s.close()


def node(store, **fields):
    return store.collection("compute_nodes").insert({
        "name": "n", "project_id": PROJECT, "node_type": "HW", "default_network": {},
        **fields})


def lb(project_id=ADMIN, **spec):
    return {"uuid": "1b000000-0000-4000-8000-000000000001", "name": "edge",
            "project_id": project_id, "type": spec}


def test_the_appliance_node_is_first_boots(store):
    assert placement.appliance_node(store) is None
    # an agent that calls itself "appliance" on a project's node, or on a VM, is not it
    issue_credential(store, node(store)["uuid"], name="appliance")
    issue_credential(store, node(store, project_id=ADMIN, node_type="VM")["uuid"],
                     name="appliance")
    assert placement.appliance_node(store) is None
    own = register_appliance(store)
    assert placement.appliance_node(store)["uuid"] == own["uuid"]
    nodes, problem = placement.placed(store, lb(kind="core_agent"))
    assert problem is None and [n["uuid"] for n in nodes] == [own["uuid"]]
    assert placement.addresses(nodes) == ["192.0.2.10"]


def test_a_project_core_agent_lb_made_before_the_rule_is_placed_nowhere(store):
    """A project's LB of type core_agent (the API refuses it now; one stored earlier may
    remain) gets no item on the appliance's own node, and says why."""
    register_appliance(store)
    assert placement.placed(store, lb(project_id=PROJECT, kind="core_agent")) == (
        [], ("ERROR", "type core_agent: only load balancers of the admin project run on "
                      "the appliance's own node; change the type to core or external_node"))


def test_each_type_and_why_it_is_on_no_node(store):
    assert placement.placed(store, lb(kind="core_agent")) == (
        [], ("ERROR", "type core_agent: the appliance has no node of its own enrolled "
                      "(first boot registers it)"))
    gone = "0d000000-0000-4000-8000-000000000009"
    assert placement.unplaced(store, lb(kind="external_node", external_node=gone)) == (
        "ERROR", f"type external_node: node {gone} not found")
    there = node(store, default_network={"ipv4": "10.0.0.4"})
    nodes, problem = placement.placed(store, lb(kind="external_node",
                                                external_node=there["uuid"]))
    assert problem is None and placement.addresses(nodes) == ["10.0.0.4"]
    core = lb(kind="core", cpu=1, ram=512, disk_size=10, nodes_number=3)
    assert placement.unplaced(store, core) == (
        "IN_PROGRESS", "type core: waiting for the nodes of set lbaas-edge")
    for index, ip in ((2, None), (0, "10.0.1.1"), (1, "10.0.1.2")):
        node(store, node_set=core["uuid"], set_index=index, node_type="VM",
             default_network={"ipv4": ip} if ip else {})
    nodes, problem = placement.placed(store, core)
    assert problem is None and [n["set_index"] for n in nodes] == [0, 1, 2]
    # a member without an address yet is not in ipsv4
    assert placement.addresses(nodes) == ["10.0.1.1", "10.0.1.2"]


def test_the_set_of_a_core_lb(store):
    spec = {"kind": "core", "cpu": 2, "ram": 1024, "disk_size": 20, "nodes_number": 2}
    made = placement.node_set({**lb(**spec), "name": ""}, "file:///images/node.qcow2")
    assert made["uuid"] == lb()["uuid"] and made["name"] == "lbaas-1b000000"
    assert (made["cores"], made["ram"], made["replicas"], made["project_id"]) == \
        (2, 1024, 2, ADMIN)
    assert made["disk_spec"] == {"kind": "root_disk", "image": "file:///images/node.qcow2",
                                 "size": 20, "tier": "WARM", "ephemeral": True}
