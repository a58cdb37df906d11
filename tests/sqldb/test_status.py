"""Status of instances, users and databases (appliance/sqldb/status.py) as the daemon's
pass writes it (appliance/sqldb/reconcile.py), from rows written into a real Store as the
report handler writes them."""

import time

import pytest

from appliance.agent.targets import View
from appliance.sqldb.members import nodes_of
from appliance.sqldb.reconcile import Planner
from appliance.sqldb.targets import items_of

from .planworld import World, at


@pytest.fixture
def world(tmp_path):
    return World(tmp_path / "state")


def hashes(world, instance):
    instance = world.instance(instance)
    items = items_of(View(world.store, world.box, world.settings), instance,
                     nodes_of(world.store, instance))
    return {uuid: item["hash"] for uuid, item in items.items()}


def cluster(world, sync=1):
    nodes = [world.add_node(i, f"127.0.0.{20 + i}") for i in (1, 2, 3)]
    instance = world.add_instance(nodes, sync=sync)
    planner = Planner(world.store, world.settings)
    planner.pass_once()
    return nodes, instance, planner


def healthy(world, nodes, instance, streaming=(1, 2), **primary_value):
    h = hashes(world, instance)
    world.report(nodes[0], instance, hash=h[nodes[0]["uuid"]], role="primary",
                 lsn="0/30", **primary_value)
    for i in (1, 2):
        world.report(nodes[i], instance, hash=h[nodes[i]["uuid"]], lsn="0/30",
                     streaming_from="127.0.0.21" if i in streaming else None)


def test_new_until_a_primary_then_in_progress_until_reports(world):
    a, b = world.add_node(1, "127.0.0.21"), world.add_node(2)
    instance = world.add_instance([a, b])
    planner = Planner(world.store, world.settings)
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"], got["primary"]) == \
        ("NEW", ("waiting for the address of node node2 (a HW node: give it the "
         "address it has, e.g. `appliance compute nodes update node2 address=<IPv4>`)"), None)
    world.set_address(b, "127.0.0.22")
    planner.pass_once()
    got = world.instance(instance)
    assert got["primary"] == a["uuid"] and got["status"] == "IN_PROGRESS"
    assert got["status_reason"] == "node node1: not reported yet"
    assert got["ipsv4"] == ["127.0.0.21", "127.0.0.22"]
    assert got["node_status"][b["uuid"]] == {"role": "replica", "status": "NEW",
                                             "reason": "not reported yet", "lsn": None}


def test_active_when_the_primary_and_enough_replicas_run(world):
    nodes, instance, planner = cluster(world)
    healthy(world, nodes, instance)
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == ("ACTIVE", None)
    assert got["node_status"][nodes[0]["uuid"]] == {"role": "primary", "status": "ACTIVE",
                                                    "reason": None, "lsn": "0/30"}
    # nothing changed: nothing written
    revision = got["revision"]
    planner.pass_once()
    assert world.instance(instance)["revision"] == revision


def test_a_replica_not_streaming_degrades_or_holds_back(world):
    nodes, instance, planner = cluster(world, sync=1)
    healthy(world, nodes, instance, streaming=(1,))
    planner.pass_once()
    got = world.instance(instance)
    assert got["status"] == "ACTIVE"
    assert got["status_reason"] == "degraded: node node3 not streaming"
    world.store.collection("sqldb_instances").update(instance["uuid"],
                                                     {"sync_replica_number": 2})
    healthy(world, nodes, instance, streaming=(1,))
    planner.pass_once()
    got = world.instance(instance)
    assert got["status"] == "IN_PROGRESS"
    assert got["status_reason"] == "waiting for replicas: 1 of 2 stream; node node3 not " \
                                   "streaming"


def test_an_old_hash_or_epoch_is_in_progress(world):
    nodes, instance, planner = cluster(world)
    healthy(world, nodes, instance)
    world.report(nodes[0], instance, hash="old", role="primary")
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == \
        ("IN_PROGRESS", "node node1: the agent has not applied it yet")
    healthy(world, nodes, instance, epoch=5)
    planner.pass_once()
    assert world.instance(instance)["status_reason"] == \
        "node node1: not primary for this epoch yet"


def test_a_member_failing_its_current_item_is_an_error(world):
    nodes, instance, planner = cluster(world)
    healthy(world, nodes, instance)
    world.report(nodes[2], instance, hash=hashes(world, instance)[nodes[2]["uuid"]],
                 status="ERROR", reason="pg_basebackup failed")
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == \
        ("ERROR", "node node3: pg_basebackup failed")


def test_a_lost_primary_that_cannot_be_replaced_is_an_error(world):
    nodes, instance, planner = cluster(world, sync=1)
    healthy(world, nodes, instance)
    row = world.row(nodes[2], instance)
    planner.clock = lambda: at(row, 11)
    planner.pass_once()
    got = world.instance(instance)
    assert got["primary"] == nodes[0]["uuid"] and got["status"] == "ERROR"
    assert got["status_reason"].startswith(f"primary node {nodes[0]['uuid']}: no report for more "
                                         "than 10 s; waiting for fresh reports of 2")
    assert got["node_status"][nodes[1]["uuid"]]["status"] == "ERROR"
    assert got["node_status"][nodes[1]["uuid"]]["reason"] == \
        "lost: no report for more than 10 s"


def test_users_and_databases_follow_the_primarys_report(world):
    nodes, instance, planner = cluster(world)
    alice = world.add_user(instance, "alice")
    bob = world.add_user(instance, "bob")
    carol = world.add_user(instance, "carol")
    shop = world.add_database(instance, "shop", alice)
    users = world.store.collection("sqldb_users")
    healthy(world, nodes, instance, users={"alice": "ok", "bob": "role \"bob\" failed"},
            databases={"shop": "ok"})
    planner.pass_once()
    assert (users.get(alice["uuid"])["status"], users.get(bob["uuid"])["status"],
            users.get(bob["uuid"])["status_reason"], users.get(carol["uuid"])["status"]) \
        == ("ACTIVE", "ERROR", "role \"bob\" failed", "NEW")
    assert world.store.collection("sqldb_databases").get(shop["uuid"])["status"] == "ACTIVE"
    # a new password (the API sets NEW): NEW until the primary reports the new hash
    users.update(alice["uuid"], {"password_hash": "SCRAM-SHA-256$4096:bmV3$x:y",
                                 "status": "NEW"})
    planner.pass_once()
    assert users.get(alice["uuid"])["status"] == "NEW"
    healthy(world, nodes, instance, users={"alice": "ok"})
    planner.pass_once()
    assert users.get(alice["uuid"])["status"] == "ACTIVE"


def test_a_member_still_applying_keeps_it_in_progress(world):
    nodes, instance, planner = cluster(world, sync=1)
    healthy(world, nodes, instance)
    world.report(nodes[2], instance, hash="old")
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == \
        ("IN_PROGRESS", "node node3: the agent has not applied it yet")


def test_a_lost_replica_leaves_it_active_and_degraded(tmp_path):
    world = World(tmp_path / "state", sqldb_failover_seconds=0.3)
    nodes, instance, planner = cluster(world, sync=1)
    h = hashes(world, instance)
    world.report(nodes[2], instance, hash=h[nodes[2]["uuid"]], streaming_from="127.0.0.21")
    time.sleep(0.4)
    world.report(nodes[0], instance, hash=h[nodes[0]["uuid"]], role="primary")
    world.report(nodes[1], instance, hash=h[nodes[1]["uuid"]], streaming_from="127.0.0.21")
    planner.clock = lambda: at(world.row(nodes[1], instance), 0)
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == (
        "ACTIVE", "degraded: node node3 not streaming (lost: no report for more than 0.3 s)")


def test_a_set_short_of_nodes_is_in_progress(world):
    instance = world.add_instance(nodes_number=2, sync=0)
    a = world.add_node(1, "127.0.0.21", node_set=instance["uuid"])
    b = world.add_node(2, "127.0.0.22", node_set=instance["uuid"])
    planner = Planner(world.store, world.settings)
    planner.pass_once()
    h = hashes(world, instance)
    world.report(a, instance, hash=h[a["uuid"]], role="primary")
    world.report(b, instance, hash=h[b["uuid"]], streaming_from="127.0.0.21")
    planner.pass_once()
    assert world.instance(instance)["status"] == "ACTIVE"
    # a PUT grows it: the set's third node is not there yet
    world.store.collection("sqldb_instances").update(instance["uuid"], {"nodes_number": 3})
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == ("IN_PROGRESS", "waiting for nodes: 2 of 3")


def test_the_sets_work_is_in_progress_and_its_error_a_degradation(world):
    instance = world.add_instance(nodes_number=1, sync=0)
    a = world.add_node(1, "127.0.0.21", node_set=instance["uuid"])
    sets = world.store.collection("compute_sets")
    sets.insert({"uuid": instance["uuid"], "name": "dbaas-db", "status": "ACTIVE",
                 "status_reason": None, "sqldb": instance["uuid"], "cores": 2, "ram": 2048,
                 "replicas": 1, "disk_spec": {"kind": "disks", "disks": [
                     {"size": 10}, {"size": 10, "label": "sqldb-data"}]}})
    planner = Planner(world.store, world.settings)
    planner.pass_once()
    world.report(a, instance, hash=hashes(world, instance)[a["uuid"]], role="primary")
    planner.pass_once()
    assert world.instance(instance)["status"] == "ACTIVE"
    # a PUT of disk_size: the item (and its hash) stays; before the compute daemon has
    # carried it to the set, the set is behind; then the set works on it
    world.store.collection("sqldb_instances").update(instance["uuid"], {"disk_size": 20})
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == \
        ("IN_PROGRESS", "node set dbaas-db: waiting for the resize")
    sets.update(instance["uuid"], {"status": "IN_PROGRESS", "disk_spec": {
        "kind": "disks", "disks": [{"size": 10}, {"size": 20, "label": "sqldb-data"}]}})
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == \
        ("IN_PROGRESS", "node set dbaas-db: in progress")
    sets.update(instance["uuid"], {"status": "ERROR", "status_reason": "dbaas-db-0: no room"})
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == \
        ("ACTIVE", "degraded: node set dbaas-db: dbaas-db-0: no room")


def test_a_member_quiet_while_applying_is_in_progress_not_lost(tmp_path):
    world = World(tmp_path / "state", sqldb_failover_seconds=0.3)
    nodes, instance, planner = cluster(world, sync=1)
    h = hashes(world, instance)
    # its last word: the base backup failed (the primary was not up yet); then quiet
    world.report(nodes[2], instance, hash=h[nodes[2]["uuid"]], status="ERROR",
                 reason="pg_basebackup failed", role="stopped", running=False)
    time.sleep(0.4)
    world.report(nodes[0], instance, hash=h[nodes[0]["uuid"]], role="primary")
    world.report(nodes[1], instance, hash=h[nodes[1]["uuid"]], streaming_from="127.0.0.21")
    planner.clock = lambda: at(world.row(nodes[1], instance), 0)
    planner.pass_once()
    got = world.instance(instance)
    assert (got["status"], got["status_reason"]) == (
        "IN_PROGRESS", "node node3: applying: no report for more than 0.3 s")


def test_lsns_alone_are_written_at_most_every_lsn_seconds(world):
    nodes, instance, planner = cluster(world)
    healthy(world, nodes, instance)
    planner.pass_once()
    revision = world.instance(instance)["revision"]
    h = hashes(world, instance)
    world.report(nodes[1], instance, hash=h[nodes[1]["uuid"]], lsn="0/40",
                 streaming_from="127.0.0.21")
    planner.pass_once()
    assert world.instance(instance)["revision"] == revision
    planner.lsn_seconds = 0
    planner.pass_once()
    got = world.instance(instance)
    assert got["revision"] == revision + 1
    assert got["node_status"][nodes[1]["uuid"]]["lsn"] == "0/40"
    # anything else is written at once
    planner.lsn_seconds = 3600
    world.report(nodes[2], instance, hash=h[nodes[2]["uuid"]], lsn="0/50")
    planner.pass_once()
    got = world.instance(instance)
    assert got["status_reason"] == "degraded: node node3 not streaming"
    assert got["node_status"][nodes[2]["uuid"]]["lsn"] == "0/50"
