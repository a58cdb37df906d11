"""The DBaaS metrics (appliance/sqldb/metrics.py): the daemon's pass (Planner) over a real
Store with the rows its members' agents report (tests/sqldb/planworld.py), read through
the registry's exposition."""

import datetime

import pytest

from appliance.sqldb.reconcile import Planner
from tests.metrics_reading import value

from .planworld import World
from .test_status import hashes


@pytest.fixture
def world(tmp_path):
    return World(tmp_path / "state")


class Clock:
    """The planner's clock (aware UTC), moved by the test; starts at the real now so the
    rows just written are fresh."""

    def __init__(self):
        self.now = datetime.datetime.now(datetime.timezone.utc)

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += datetime.timedelta(seconds=seconds)


def report_all(world, nodes, instance, primary_lsn, replica_lsns):
    h = hashes(world, instance)
    world.report(nodes[0], instance, hash=h[nodes[0]["uuid"]], role="primary",
                 lsn_int=primary_lsn)
    for node, lsn in zip(nodes[1:], replica_lsns):
        world.report(node, instance, hash=h[node["uuid"]], lsn_int=lsn,
                     streaming_from="127.0.0.21")


def test_primary_and_replication_lag_from_reports(world):
    nodes = [world.add_node(i, f"127.0.0.{20 + i}") for i in (1, 2, 3)]
    instance = world.add_instance(nodes, name="orders")
    clock = Clock()
    planner = Planner(world.store, world.settings, clock=clock)
    planner.pass_once()
    assert world.instance(instance)["primary"] == nodes[0]["uuid"]

    def labels(i):
        return {"instance": instance["uuid"], "name": "orders",
                "project": instance["project_id"], "node": nodes[i]["uuid"]}

    report_all(world, nodes, instance, 1000, [1000, 1000])
    planner.pass_once()
    assert [value("appliance_sqldb_primary", **labels(i)) for i in range(3)] == [1, 0, 0]
    assert value("appliance_sqldb_replication_lag_bytes", **labels(1)) == 0
    assert value("appliance_sqldb_replication_lag_seconds", **labels(1)) == 0
    assert value("appliance_sqldb_member_running", **labels(2)) == 1

    # the primary moves on at t+2; replica 2 follows, replica 3 stays where it was
    # (steps well inside sqldb_failover_seconds: the rows stay fresh)
    clock.advance(2)
    report_all(world, nodes, instance, 5000, [5000, 1000])
    planner.pass_once()
    clock.advance(3)
    report_all(world, nodes, instance, 9000, [9000, 1000])
    planner.pass_once()
    assert value("appliance_sqldb_replication_lag_bytes", **labels(1)) == 0
    assert value("appliance_sqldb_replication_lag_bytes", **labels(2)) == 8000
    # behind since the planner first saw the primary past 1000 (at t+2): 3 s
    assert value("appliance_sqldb_replication_lag_seconds", **labels(2)) == \
        pytest.approx(3.0)
    assert value("appliance_sqldb_replication_lag_seconds", **labels(1)) == 0


def test_a_failover_moves_the_primary_flag_and_a_deleted_instance_leaves(world):
    nodes = [world.add_node(i, f"127.0.0.{20 + i}") for i in (1, 2)]
    instance = world.add_instance(nodes, name="gone-soon")
    planner = Planner(world.store, world.settings)
    planner.pass_once()
    report_all(world, nodes, instance, 10, [10])
    planner.pass_once()
    first = {"instance": instance["uuid"], "node": nodes[0]["uuid"]}
    second = {"instance": instance["uuid"], "node": nodes[1]["uuid"]}
    assert value("appliance_sqldb_primary", **first) == 1
    world.set_primary(instance, nodes[1], epoch=1)
    planner.pass_once()
    assert value("appliance_sqldb_primary", **first) == 0
    assert value("appliance_sqldb_primary", **second) == 1
    world.store.collection("sqldb_instances").delete(instance["uuid"])
    planner.pass_once()
    assert value("appliance_sqldb_primary", **second) is None
    assert value("appliance_sqldb_replication_lag_bytes", **first) is None
    assert instance["uuid"] not in planner.metrics.history


def test_an_unreadable_report_counts_an_error_and_the_pass_goes_on(world):
    nodes = [world.add_node(i, f"127.0.0.{20 + i}") for i in (1, 2)]
    instance = world.add_instance(nodes)
    planner = Planner(world.store, world.settings)
    planner.pass_once()
    h = hashes(world, instance)
    world.report(nodes[0], instance, hash=h[nodes[0]["uuid"]], role="primary",
                 lsn_int="not a number")
    world.report(nodes[1], instance, hash=h[nodes[1]["uuid"]], lsn_int=3,
                 streaming_from="127.0.0.21")
    before = value("appliance_infra_collection_errors_total", family="sqldb") or 0
    planner.pass_once()
    assert value("appliance_infra_collection_errors_total", family="sqldb") == before + 1
    assert planner.failed == []
    assert world.instance(instance)["status"] == "ACTIVE"
