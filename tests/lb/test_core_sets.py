"""Type core: the LB's own node set `lbaas-<name>`, made, resized and deleted by the
platform step (appliance/lb/reconcile.py) that the compute daemon runs; against libvirt's
`test:///default` as tests/compute do (no guest boots)."""

import pytest

from appliance.lb import placement
from appliance.lb.reconcile import reconcile_lb_sets
from tests.compute.reconcile_helpers import World

ADMIN = "00000000-0000-0000-0000-000000000000"
PROJECT = "11111111-2222-3333-4444-555555555555"
CORE = {"kind": "core", "cpu": 2, "ram": 1024, "disk_size": 12, "nodes_number": 1}


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    w.settings["lb_image"] = w.url("base.raw")
    yield w
    w.close()


def add_lb(world, name="edge", **spec):
    return world.store.collection("network_lb").insert({
        "name": name, "project_id": PROJECT, "type": {**CORE, **spec}, "status": "NEW"})


def lb_set(world, lb):
    return world.store.collection("compute_sets").get(lb["uuid"])


def members(world, lb):
    return world.store.collection("compute_nodes").by("node_set", lb["uuid"])


def test_the_set_follows_the_lb(world):
    lb = add_lb(world)
    assert reconcile_lb_sets(world.store, world.settings) == 1
    made = lb_set(world, lb)
    assert (made["name"], made["project_id"], made["cores"], made["ram"], made["replicas"]) \
        == ("lbaas-edge", ADMIN, 2, 1024, 1)
    assert made["disk_spec"] == {"kind": "root_disk", "image": world.url("base.raw"),
                                 "size": 12, "tier": "WARM", "ephemeral": True}
    assert made["lb"] == lb["uuid"] and made["status"] == "NEW"
    # nothing changed: nothing written
    assert reconcile_lb_sets(world.store, world.settings) == 0
    world.store.collection("network_lb").update(lb["uuid"], {"type": {
        **CORE, "nodes_number": 3, "disk_size": 20}})
    assert reconcile_lb_sets(world.store, world.settings) == 1
    resized = lb_set(world, lb)
    assert (resized["replicas"], resized["disk_spec"]["size"], resized["status"]) == \
        (3, 20, "IN_PROGRESS")
    # no longer core: the set goes
    world.store.collection("network_lb").update(lb["uuid"], {"type": {"kind": "core_agent"}})
    reconcile_lb_sets(world.store, world.settings)
    assert lb_set(world, lb) is None


def test_without_lb_image_no_set_is_made(world):
    lb = add_lb(world)
    assert reconcile_lb_sets(world.store, {**world.settings, "lb_image": None}) == 0
    assert lb_set(world, lb) is None
    assert placement.unplaced(world.store, lb)[0] == "IN_PROGRESS"


def test_the_compute_daemon_makes_the_lb_nodes(world):
    lb = add_lb(world, nodes_number=2)
    reconciler = world.reconciler()
    for _ in range(3):
        reconciler.pass_once()
    nodes = sorted(members(world, lb), key=lambda n: n["set_index"])
    assert [n["name"] for n in nodes] == ["lbaas-edge-0", "lbaas-edge-1"]
    assert all(world.domain(n["uuid"]) is not None for n in nodes)
    placed, problem = placement.placed(world.store, lb)
    assert problem is None and [n["uuid"] for n in placed] == [n["uuid"] for n in nodes]
    # scale down, then the LB deleted: its set, members and domains go
    world.store.collection("network_lb").update(lb["uuid"], {"type": {**CORE,
                                                                       "nodes_number": 1}})
    reconciler.pass_once()
    assert [n["name"] for n in members(world, lb)] == ["lbaas-edge-0"]
    assert world.domain(nodes[1]["uuid"]) is None
    world.store.collection("network_lb").delete(lb["uuid"])
    reconciler.pass_once()
    assert lb_set(world, lb) is None and members(world, lb) == []
    assert world.domain(nodes[0]["uuid"]) is None


def test_deleting_a_core_lb_through_the_api_takes_its_set(server):
    from tests.conftest import ADMIN_PASSWORD
    from .helpers import make_lb
    admin = server.client(server.login("admin", ADMIN_PASSWORD))
    lb = make_lb(admin, type={"kind": "core"})
    reconcile_lb_sets(server.store, server.settings)
    assert server.store.collection("compute_sets").get(lb["uuid"]) is not None
    server.store.collection("compute_nodes").insert({
        "name": "lbaas-x-0", "project_id": ADMIN, "node_type": "VM",
        "node_set": lb["uuid"], "set_index": 0})
    assert admin.delete(f"/v1/network/lb/{lb['uuid']}").status == 204
    assert server.store.collection("compute_sets").get(lb["uuid"]) is None
    assert server.store.collection("compute_nodes").by("node_set", lb["uuid"]) == []
