"""Placement node_set: the instance's hidden set `dbaas-<name>` (appliance/sqldb/sets.py),
made, resized, never shrunk and deleted, and its nodes made by the compute daemon's pass;
against libvirt's `test:///default` as tests/lb/test_core_sets.py does (no guest boots)."""

import uuid as uuidlib

import pytest

from appliance.compute.placement import SOFT_ANTI, place
from appliance.sqldb.sets import DATA_MOUNT, reconcile_sqldb_sets
from tests.compute.reconcile_helpers import World

ADMIN = "00000000-0000-0000-0000-000000000000"
PROJECT = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    w.version = w.store.collection("sqldb_versions").insert({
        "name": "15", "description": "", "image": w.url("base.raw"), "major": 15,
        "deprecated": False})
    yield w
    w.close()


def add_instance(world, name="orders", nodes_number=1, **fields):
    return world.store.collection("sqldb_instances").insert({
        "uuid": str(uuidlib.uuid4()), "name": name, "project_id": PROJECT, "cpu": 2,
        "ram": 1024, "disk_size": 12, "nodes_number": nodes_number,
        "sync_replica_number": 0, "version": world.version["uuid"],
        "placement": {"kind": "node_set"}, "status": "NEW", "primary": None, "epoch": 0,
        **fields})


def the_set(world, instance):
    return world.store.collection("compute_sets").get(instance["uuid"])


def members(world, instance):
    return world.store.collection("compute_nodes").by("node_set", instance["uuid"])


def test_the_set_follows_the_instance(world):
    instance = add_instance(world)
    assert reconcile_sqldb_sets(world.store, world.settings) == 2     # the set, its policy
    made = the_set(world, instance)
    assert (made["name"], made["project_id"], made["cores"], made["ram"], made["replicas"],
            made["sqldb"], made["status"]) == \
        ("dbaas-orders", ADMIN, 2, 1024, 1, instance["uuid"], "NEW")
    root, data = made["disk_spec"]["disks"]
    assert root["image"] == world.url("base.raw")
    assert (data["size"], data["mount_point"], data["label"]) == (12, DATA_MOUNT,
                                                                  "sqldb-data")
    assert reconcile_sqldb_sets(world.store, world.settings) == 0
    instances = world.store.collection("sqldb_instances")
    instances.update(instance["uuid"], {"nodes_number": 3, "disk_size": 20, "cpu": 4})
    assert reconcile_sqldb_sets(world.store, world.settings) == 1
    resized = the_set(world, instance)
    assert (resized["replicas"], resized["cores"], resized["disk_spec"]["disks"][1]["size"],
            resized["status"]) == (3, 4, 20, "IN_PROGRESS")
    # never shrunk
    instances.update(instance["uuid"], {"nodes_number": 2})
    assert reconcile_sqldb_sets(world.store, world.settings) == 0
    assert the_set(world, instance)["replicas"] == 3
    instances.delete(instance["uuid"])
    reconcile_sqldb_sets(world.store, world.settings)
    assert the_set(world, instance) is None


def test_placement_nodes_and_no_image_make_no_set(world):
    add_instance(world, placement={"kind": "nodes", "nodes": [str(uuidlib.uuid4())]})
    world.store.collection("sqldb_versions").update(world.version["uuid"], {"image": ""})
    bare = add_instance(world, name="bare")
    assert reconcile_sqldb_sets(world.store, {**world.settings, "lb_image": None}) == 0
    # the node image of lb_image serves a version without its own
    assert reconcile_sqldb_sets(world.store, {**world.settings,
                                              "lb_image": world.url("base.raw")}) == 2
    assert the_set(world, bare)["disk_spec"]["disks"][0]["image"] == world.url("base.raw")


def test_the_compute_daemon_makes_and_removes_the_nodes(world):
    instance = add_instance(world, nodes_number=2)
    reconciler = world.reconciler()
    for _ in range(3):
        reconciler.pass_once()
    nodes = sorted(members(world, instance), key=lambda n: n["set_index"])
    assert [n["name"] for n in nodes] == ["dbaas-orders-0", "dbaas-orders-1"]
    assert all(world.domain(n["uuid"]) is not None for n in nodes)
    world.store.collection("sqldb_instances").delete(instance["uuid"])
    reconciler.pass_once()
    assert the_set(world, instance) is None and members(world, instance) == []
    assert all(world.domain(n["uuid"]) is None for n in nodes)


def test_the_members_spread_over_the_hypervisors(world):
    """Found on VMs (tests/compute/test_sqldb_on_vms.py): with no policy, placement only
    spreads by free RAM, so a hypervisor with more room than another takes both members,
    and the replica dies with its primary's machine. The members name a soft-anti-affinity
    policy of the instance's, made with the set and deleted with the instance."""
    instance = add_instance(world, nodes_number=2)
    reconcile_sqldb_sets(world.store, world.settings)
    policies = world.store.collection("compute_placement_policies")
    policy = policies.get(instance["uuid"])
    assert (policy["kind"], policy["project_id"], policy["name"]) == \
        (SOFT_ANTI, ADMIN, "dbaas-orders")
    assert the_set(world, instance)["placement_policies"] == [policy["uuid"]]
    big = {"uuid": "b" * 8, "status": "ACTIVE", "all_cores": 64, "all_ram": 262144,
           "all_disk": 1000}
    small = {"uuid": "a" * 8, "status": "ACTIVE", "all_cores": 8, "all_ram": 16384,
             "all_disk": 1000}
    first = {"uuid": "n1", "cores": 2, "ram": 1024, "placement_policies": [policy["uuid"]]}
    second = {**first, "uuid": "n2"}
    where, _ = place(first, [big, small], [], {policy["uuid"]: policy})
    assert where == big["uuid"]                  # the most room
    placed = [{**first, "hypervisor": where}]
    assert place(second, [big, small], placed, {policy["uuid"]: policy})[0] == small["uuid"]
    # without the policy the big one would take it too: what the policy is for
    assert place({**second, "placement_policies": []}, [big, small], placed, {})[0] == \
        big["uuid"]
    world.store.collection("sqldb_instances").delete(instance["uuid"])
    reconcile_sqldb_sets(world.store, world.settings)
    assert policies.get(instance["uuid"]) is None and the_set(world, instance) is None
