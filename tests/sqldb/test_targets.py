"""The producer of kind sqldb (appliance/sqldb/targets.py) over a real Store holding
records in the API's shapes."""

import pytest

from appliance.agent import capabilities
from appliance.agent.protocol import target_uuid
from appliance.agent.targets import View, items_for
from appliance.sqldb.members import pg_name
from appliance.sqldb.targets import for_node, member_network

from .planworld import PROJECT, World


@pytest.fixture
def world(tmp_path):
    return World(tmp_path / "state", sqldb_client_networks="192.0.2.0/24, bad, 198.51.100.7")


def view(world):
    return View(world.store, world.box, world.settings)


def test_no_item_before_the_first_primary(world):
    node = world.add_node(1, "127.0.0.21")
    world.add_instance([node], sync=0)
    assert for_node(view(world), node) == []


def test_every_member_gets_its_item(world):
    nodes = [world.add_node(i, f"127.0.0.{20 + i}") for i in (2, 1, 3)]
    world.store.collection("network_networks").insert({
        "name": "net", "project_id": PROJECT, "cidr": "10.20.0.0/24"})
    world.store.collection("network_networks").insert({
        "name": "other", "project_id": "99999999-2222-3333-4444-555555555555",
        "cidr": "10.99.0.0/24"})
    instance = world.add_instance(nodes, sync=1)
    alice = world.add_user(instance, "alice", "SCRAM-SHA-256$4096:YQ==$b:c")
    world.add_user(instance, "bob")
    world.add_database(instance, "shop", alice)
    world.add_database(instance, "orphan", {"uuid": "00000000-0000-4000-8000-00000000dead"})
    world.set_primary(instance, nodes[1], epoch=2)
    items = {n["uuid"]: for_node(view(world), n) for n in nodes}
    assert all(len(i) == 1 for i in items.values())
    item = items[nodes[0]["uuid"]][0]
    assert item["uuid"] == target_uuid(nodes[0]["uuid"], "sqldb", instance["uuid"])
    assert (item["kind"], item["master"], item["master_kind"]) == \
        ("sqldb", instance["uuid"], "sqldb_instances")
    value = item["value"]
    first = {"node": nodes[1]["uuid"], "host": "127.0.0.21", "name": pg_name(nodes[1]["uuid"])}
    assert value["self"] == {"node": nodes[0]["uuid"], "host": "127.0.0.22",
                             "name": "n" + nodes[0]["uuid"].replace("-", "")}
    assert value["role"] == "replica" and value["primary"] == first
    assert [m["node"] for m in value["members"]] == sorted(n["uuid"] for n in nodes)
    assert (value["instance"], value["epoch"], value["major"], value["port"],
            value["sync_replica_number"]) == (instance["uuid"], 2, 15, 5432, 1)
    # the default client networks: the project's networks (not another project's), the
    # network each member sits on (no mask known here: its address), then the setting (its
    # malformed entry left out)
    hosts = [f"{n['default_network']['ipv4']}/32" for n in
             sorted(nodes, key=lambda n: n["uuid"])]
    assert value["hba"] == ["10.20.0.0/24", *hosts, "192.0.2.0/24", "198.51.100.7/32"]
    assert value["replication"] == {"user": "dbaas_replicator", "password": "repl-secret"}
    assert value["admin"] == {"user": "dbaas_admin", "password": "admin-secret"}
    assert value["users"] == {"alice": "SCRAM-SHA-256$4096:YQ==$b:c",
                              "bob": "SCRAM-SHA-256$4096:c2FsdA==$a:b"}
    assert value["databases"] == {"shop": "alice"}
    assert value["resources"] == {"cpu": 2, "ram_mb": 2048}
    assert items[nodes[1]["uuid"]][0]["value"]["role"] == "primary"
    # the same value but self and role on every member
    strip = lambda v: {k: x for k, x in v.items() if k not in ("self", "role")}  # noqa: E731
    assert len({str(strip(i[0]["value"])) for i in items.values()}) == 1


def test_a_member_without_an_address_waits_unavailable(world):
    # unavailable, not absent: an item gone makes the driver remove the instance's data
    a, b = world.add_node(1, "127.0.0.21"), world.add_node(2)
    instance = world.add_instance([a, b], sync=1)
    world.set_primary(instance, a)
    (waiting,) = for_node(view(world), b)
    assert (waiting["value"], waiting["unavailable"]) == \
        (None, "waiting for the node's address")
    (item,) = for_node(view(world), a)
    assert [m["node"] for m in item["value"]["members"]] == [a["uuid"]]


def test_a_primary_without_an_address_makes_every_item_unavailable(world):
    a, b = world.add_node(1, "127.0.0.21"), world.add_node(2, "127.0.0.22")
    instance = world.add_instance([a, b], sync=1)
    world.set_primary(instance, a)
    world.store.collection("compute_nodes").delete(a["uuid"])
    (item,) = for_node(view(world), b)
    assert item["value"] is None
    assert item["unavailable"] == f"primary node {a['uuid']} has no address or is gone"


def test_a_missing_version_makes_the_items_unavailable(world):
    a = world.add_node(1, "127.0.0.21")
    instance = world.add_instance([a], sync=0)
    world.set_primary(instance, a)
    world.store.collection("sqldb_versions").delete(world.version["uuid"])
    (item,) = for_node(view(world), a)
    assert item["unavailable"] == f"version {world.version['uuid']} not found"


def test_the_set_members_and_the_registered_producer(world):
    instance = world.add_instance(nodes_number=2, sync=1)
    a = world.add_node(1, "127.0.0.21", node_set=instance["uuid"])
    world.add_node(2, "127.0.0.22", node_set=instance["uuid"])
    world.set_primary(instance, a)
    assert "sqldb" in capabilities.producers() and "sqldb" not in capabilities.MASTERS
    items, _ = items_for(view(world), a)
    assert [i["kind"] for i in items] == ["sqldb"]
    assert len(items[0]["value"]["members"]) == 2 and items[0]["hash"]


def test_settings_absent_fall_back_to_the_defaults(world):
    a = world.add_node(1, "127.0.0.21")
    instance = world.add_instance([a], sync=0)
    world.set_primary(instance, a)
    (item,) = for_node(View(world.store, world.box), a)
    assert item["value"]["port"] == 5432 and item["value"]["hba"] == ["127.0.0.21/32"]


def test_client_networks_of_the_instance_replace_the_default(world):
    a = world.add_node(1, "127.0.0.21")
    instance = world.add_instance([a], sync=0)
    world.set_primary(instance, a)
    instances = world.store.collection("sqldb_instances")
    instances.update(instance["uuid"], {"client_networks": ["203.0.113.0/24"]})
    (item,) = for_node(view(world), a)
    assert item["value"]["hba"] == ["203.0.113.0/24"]
    # [] lets no client in: the setting does not come back through it
    instances.update(instance["uuid"], {"client_networks": []})
    (closed,) = for_node(view(world), a)
    assert closed["value"]["hba"] == []


@pytest.mark.parametrize("default_network,expected", [
    ({"ipv4": "10.0.2.15", "mask": 24}, "10.0.2.0/24"),           # first boot's NIC: a prefix
    ({"ipv4": "10.20.0.21", "mask": "255.255.252.0"}, "10.20.0.0/22"),  # a port: dotted
    ({"ipv4": "198.51.100.7", "mask": None}, "198.51.100.7/32"),   # a HW address, no network
    ({"ipv4": "10.1.2.3", "mask": 4}, "10.1.2.3/32"),              # wider than /8: itself
    ({"ipv4": "10.1.2.3", "mask": "garbage"}, "10.1.2.3/32"),
    ({}, None), (None, None), ({"ipv4": "not-an-address"}, None),
])
def test_the_network_a_member_sits_on(default_network, expected):
    assert member_network({"default_network": default_network}) == expected
