"""Who the primary is (appliance/sqldb/failover.py): every branch of `decide`, over rows
written into a real Store as the report handler writes them; `now` is placed relative to
the rows' own `updated_at` (the store's clock). A primary's row is made stale by writing
the replicas' rows more than LIMIT later (a short sleep: a row's time is the store's)."""

import datetime
import time

import pytest

from appliance.sqldb import failover
from appliance.sqldb.members import nodes_of, rows_of
from appliance.sqldb.reconcile import Planner

from .planworld import World, at

LIMIT = 0.3


@pytest.fixture
def world(tmp_path):
    return World(tmp_path / "state", sqldb_failover_seconds=LIMIT)


def three(world, sync=1):
    nodes = [world.add_node(i, f"127.0.0.{20 + i}") for i in (1, 2, 3)]
    return nodes, world.add_instance(nodes, sync=sync)


def decide(world, instance, now, down_since=None):
    instance = world.instance(instance)
    nodes = nodes_of(world.store, instance)
    return failover.decide(instance, nodes, rows_of(world.store, instance, nodes), now,
                           LIMIT, down_since)


def now():
    return datetime.datetime.now(datetime.timezone.utc)


# ---- the first primary ------------------------------------------------------------------

def test_first_primary_waits_for_every_node_then_takes_the_lowest_uuid(world):
    a = world.add_node(3, "127.0.0.23")
    b = world.add_node(1)
    instance = world.add_instance([a, b])
    d = decide(world, instance, now())
    assert (d.action, d.primary) == ("wait", None)
    assert d.reason == ("waiting for the address of node node1 (a HW node: give it the "
         "address it has, e.g. `appliance compute nodes update node1 address=<IPv4>`)")
    world.set_address(b, "127.0.0.21")
    d = decide(world, instance, now())
    assert (d.action, d.primary, d.epoch) == ("first", b["uuid"], 0)


def test_first_primary_waits_for_the_sets_nodes(world):
    instance = world.add_instance(nodes_number=2)
    world.add_node(1, "127.0.0.21", node_set=instance["uuid"])
    d = decide(world, instance, now())
    assert (d.action, d.reason) == ("wait", "waiting for nodes: 1 of 2")
    world.add_node(2, "127.0.0.22", node_set=instance["uuid"])
    assert decide(world, instance, now()).primary == world.store.collection(
        "compute_nodes").get(nodes_of(world.store, instance)[0]["uuid"])["uuid"]


# ---- the primary alive ------------------------------------------------------------------

def test_a_primary_that_never_reported_is_not_lost(world):
    nodes, instance = three(world)
    world.set_primary(instance, nodes[0])
    assert decide(world, instance, now()).action == "none"


def test_freshness_boundary_last_fresh_and_first_stale(world):
    nodes, instance = three(world)
    row = stale_primary(world, nodes, instance)
    for replica in nodes[1:]:
        world.report(replica, instance, lsn_int=5)
    assert decide(world, instance, at(row, LIMIT)).action == "none"
    assert decide(world, instance, at(row, LIMIT + 0.001)).action == "failover"


def test_not_running_counts_only_after_the_limit(world):
    nodes, instance = three(world)
    world.set_primary(instance, nodes[0])
    world.report(nodes[0], instance, role="primary", running=False)
    for replica in nodes[1:]:
        world.report(replica, instance, lsn_int=5)
    t = now()
    down = {nodes[0]["uuid"]: t - datetime.timedelta(seconds=LIMIT)}
    assert decide(world, instance, t, down).action == "none"
    down = {nodes[0]["uuid"]: t - datetime.timedelta(seconds=LIMIT + 0.5)}
    d = decide(world, instance, t, down)
    assert d.action == "failover" and "not running for more than 0.3 s" in d.reason


def test_track_down_keeps_the_first_time_and_forgets_a_running_node(world):
    nodes, instance = three(world)
    world.report(nodes[0], instance, running=False)
    rows = rows_of(world.store, instance, nodes)
    t1, t2 = now(), now() + datetime.timedelta(seconds=3)
    down = failover.track_down({}, rows, t1)
    assert down == {nodes[0]["uuid"]: t1}
    assert failover.track_down(down, rows, t2) == {nodes[0]["uuid"]: t1}
    world.report(nodes[0], instance, running=True)
    assert failover.track_down(down, rows_of(world.store, instance, nodes), t2) == {}


# ---- promotion --------------------------------------------------------------------------

def stale_primary(world, nodes, instance, epoch=0):
    """The primary's row, then a pause longer than LIMIT: rows written after it are fresh
    when it is stale."""
    world.set_primary(instance, nodes[0], epoch=epoch)
    row = world.report(nodes[0], instance, role="primary", epoch=epoch)
    time.sleep(LIMIT + 0.1)
    return row


def last_written(world):
    """The moment the newest row was written: every row written after the pause is fresh."""
    return at(max(world.store.collection("ua_resources").records(),
                  key=lambda r: r["updated_at"]), 0)


def test_the_replica_with_the_highest_lsn_is_promoted(world):
    nodes, instance = three(world)
    stale_primary(world, nodes, instance)
    world.report(nodes[1], instance, lsn_int=100)
    world.report(nodes[2], instance, lsn_int=200)
    d = decide(world, instance, last_written(world))
    assert (d.action, d.primary, d.epoch) == ("failover", nodes[2]["uuid"], 1)
    assert "no report for more than 0.3 s" in d.reason and "lsn 200" in d.reason


def test_equal_lsns_promote_the_lowest_uuid(world):
    nodes, instance = three(world)
    stale_primary(world, nodes, instance)
    world.report(nodes[2], instance, lsn_int=7)
    world.report(nodes[1], instance, lsn_int=7)
    assert decide(world, instance, last_written(world)).primary == nodes[1]["uuid"]


def test_k1_of_two_replicas_needs_both_fresh(world):
    # m = 2, k = 1: m - k + 1 = 2 fresh rows, or the one missing may hold the last commit
    nodes, instance = three(world, sync=1)
    stale_primary(world, nodes, instance)
    world.report(nodes[1], instance, lsn_int=100)
    d = decide(world, instance, last_written(world))
    assert (d.action, d.primary) == ("wait", nodes[0]["uuid"])
    assert "waiting for fresh reports of 2 of 2 replicas (have 1)" in d.reason


def test_k2_of_two_replicas_needs_one_fresh(world):
    # k = m: every commit is on every replica, so any one of them has it
    nodes, instance = three(world, sync=2)
    stale_primary(world, nodes, instance)
    world.report(nodes[2], instance, lsn_int=100)
    d = decide(world, instance, last_written(world))
    assert (d.action, d.primary) == ("failover", nodes[2]["uuid"])


def test_k0_takes_any_fresh_replica(world):
    nodes, instance = three(world, sync=0)
    stale_primary(world, nodes, instance)
    world.report(nodes[1], instance, lsn_int=1)
    assert decide(world, instance, last_written(world)).primary == nodes[1]["uuid"]


def test_k0_without_any_fresh_replica_waits(world):
    nodes, instance = three(world, sync=0)
    row = stale_primary(world, nodes, instance)
    d = decide(world, instance, at(row, LIMIT + 1))
    assert d.action == "wait" and "1 of 2 replicas (have 0)" in d.reason


def test_stale_stopped_and_old_epoch_replicas_do_not_count(world):
    nodes, instance = three(world, sync=2)
    stale_primary(world, nodes, instance, epoch=3)
    world.report(nodes[1], instance, lsn_int=900, epoch=2)          # an older epoch
    world.report(nodes[2], instance, lsn_int=900, epoch=3, running=False)
    d = decide(world, instance, last_written(world))
    assert d.action == "wait" and "(have 0)" in d.reason
    world.report(nodes[2], instance, lsn_int=900, epoch=3, role="primary")
    assert decide(world, instance, last_written(world)).action == "wait"
    world.report(nodes[2], instance, lsn_int=900, epoch=3)
    d = decide(world, instance, last_written(world))
    assert (d.action, d.primary, d.epoch) == ("failover", nodes[2]["uuid"], 4)


def test_a_replica_row_gone_stale_does_not_count(world):
    nodes, instance = three(world, sync=2)
    world.report(nodes[1], instance, lsn_int=5)
    row = stale_primary(world, nodes, instance)
    # the replica's row, written before the primary's, is stale too
    assert decide(world, instance, at(row, LIMIT + 0.001)).action == "wait"
    world.report(nodes[1], instance, lsn_int=6)
    assert decide(world, instance, last_written(world)).action == "failover"


def test_a_primary_whose_node_is_gone_is_lost_at_once(world):
    nodes, instance = three(world, sync=2)
    world.set_primary(instance, nodes[0])
    world.report(nodes[0], instance, role="primary")
    world.report(nodes[1], instance, lsn_int=5)
    world.store.collection("compute_nodes").delete(nodes[0]["uuid"])
    d = decide(world, instance, now())
    assert d.action == "failover" and d.reason.startswith(f"primary node {nodes[0]['uuid']} "
                                                          "is gone")


def test_a_single_node_has_no_replica_to_promote(world):
    node = world.add_node(1, "127.0.0.21")
    instance = world.add_instance([node], sync=0)
    world.set_primary(instance, node)
    row = world.report(node, instance, role="primary")
    d = decide(world, instance, at(row, LIMIT + 1))
    assert d.action == "wait" and d.reason.endswith("no replica to promote")


# ---- the write --------------------------------------------------------------------------

def test_the_planner_writes_the_first_primary_then_a_failover_once(world):
    nodes, instance = three(world, sync=1)
    clock = [now()]
    planner = Planner(world.store, world.settings, clock=lambda: clock[0])
    planner.pass_once()
    first = world.instance(instance)
    assert (first["primary"], first["epoch"]) == (nodes[0]["uuid"], 0)
    world.report(nodes[0], instance, role="primary")
    time.sleep(LIMIT + 0.1)
    world.report(nodes[1], instance, lsn_int=10)
    world.report(nodes[2], instance, lsn_int=20)
    clock[0] = last_written(world)
    planner.pass_once()
    moved = world.instance(instance)
    assert (moved["primary"], moved["epoch"]) == (nodes[2]["uuid"], 1)
    # the old primary's row is still stale, but it is no longer the primary: no second
    # failover while the new one reports
    world.report(nodes[2], instance, lsn_int=20, epoch=1, role="primary")
    planner.pass_once()
    assert world.instance(instance)["epoch"] == 1


def test_a_broken_instance_does_not_hold_back_the_others(world):
    nodes, instance = three(world, sync=1)
    broken = world.add_instance([world.add_node(9, "127.0.0.29")], sync=0)
    # a record no API would write: its step raises
    world.store.collection("sqldb_instances").update(broken["uuid"], {"nodes_number": "x"})
    planner = Planner(world.store, world.settings)
    planner.pass_once()
    assert planner.failed == [broken["uuid"]]
    assert world.instance(instance)["primary"] == nodes[0]["uuid"]


# ---- detection: the replicas' word shortens the silence ----------------------------------

LONG = 10.0     # a limit above failover.CORROBORATED_SECONDS


def decide_long(world, instance, when, primary_item=None):
    instance = world.instance(instance)
    nodes = nodes_of(world.store, instance)
    return failover.decide(instance, nodes, rows_of(world.store, instance, nodes), when,
                           LONG, primary_item=primary_item)


def primary_and_replicas(world, *streaming):
    """A primary's row, then its replicas' rows saying what each streams from."""
    nodes, instance = three(world)
    world.set_primary(instance, nodes[0])
    row = world.report(nodes[0], instance, role="primary")
    for replica, source in zip(nodes[1:], streaming):
        world.report(replica, instance, lsn_int=5, streaming_from=source)
    return nodes, instance, row


def test_a_silent_primary_its_replicas_lost_is_lost_after_the_short_silence(world):
    nodes, instance, row = primary_and_replicas(world, None, None)
    fast = failover.CORROBORATED_SECONDS
    assert decide_long(world, instance, at(row, fast)).action == "none"
    d = decide_long(world, instance, at(row, fast + 0.01))
    assert d.action == "failover" and d.epoch == 1
    assert f"no report for more than {fast:g} s and no replica streams from it" in d.reason


def test_a_silent_primary_its_replicas_still_stream_from_keeps_the_whole_limit(world):
    """A slow or dead agent on a primary whose PostgreSQL still serves: no early failover."""
    nodes, instance, row = primary_and_replicas(world, "127.0.0.21", "127.0.0.21")
    fast = failover.CORROBORATED_SECONDS
    assert decide_long(world, instance, at(row, fast + 0.01)).action == "none"
    assert decide_long(world, instance, at(row, LONG)).action == "none"
    # lost at the whole limit (the replicas' rows, written with it, are as old by then:
    # it waits for fresh ones)
    d = decide_long(world, instance, at(row, LONG + 0.01))
    assert d.reason.startswith(f"primary node {nodes[0]['uuid']}: no report for more than "
                               f"{LONG:g} s;")


def test_a_primary_not_yet_serving_its_epoch_keeps_the_whole_limit(world):
    """A replica just promoted (its last row says replica of the epoch before) may be
    silent while it promotes; the other replicas do not stream from it yet either."""
    nodes, instance = three(world)
    world.set_primary(instance, nodes[0], epoch=1)
    row = world.report(nodes[0], instance, role="replica", epoch=0)
    for replica in nodes[1:]:
        world.report(replica, instance, lsn_int=5, epoch=1)
    fast = failover.CORROBORATED_SECONDS
    assert decide_long(world, instance, at(row, fast + 0.5)).action == "none"
    row = world.report(nodes[0], instance, role="primary", epoch=1)
    d = decide_long(world, instance, at(row, fast + 0.01))
    assert d.action == "failover" and d.epoch == 2


def test_a_primary_applying_a_new_item_keeps_the_whole_limit(world):
    """A changed setting may restart it (its replicas' streams stop) while its agent,
    busy applying, sends no report: not a loss before the whole limit."""
    nodes, instance, row = primary_and_replicas(world, None, None)
    when = at(row, failover.CORROBORATED_SECONDS + 0.5)
    assert decide_long(world, instance, when, {"hash": "a newer item"}).action == "none"
    assert decide_long(world, instance, when, {"hash": row["hash"]}).action == "failover"


def test_one_replica_still_streaming_is_enough_to_wait(world):
    nodes, instance, row = primary_and_replicas(world, None, "127.0.0.21")
    assert decide_long(world, instance,
                       at(row, failover.CORROBORATED_SECONDS + 0.5)).action == "none"


def test_too_few_fresh_replicas_say_nothing(world):
    """With k = 1 of 2 replicas both must report: one alone is no quorum, so neither a
    shorter silence nor a promotion."""
    nodes, instance, row = primary_and_replicas(world, None)
    assert decide_long(world, instance,
                       at(row, failover.CORROBORATED_SECONDS + 0.5)).action == "none"


def test_next_check_is_the_next_silence_that_counts(world):
    nodes, instance, row = primary_and_replicas(world, None, None)
    fast = failover.CORROBORATED_SECONDS
    assert failover.next_check(row, at(row, 1.0), LONG) == pytest.approx(fast - 1.0)
    assert failover.next_check(row, at(row, fast + 1), LONG) == pytest.approx(LONG - fast - 1)
    assert failover.next_check(row, at(row, LONG + 1), LONG) is None
    assert failover.next_check(None, at(row, 1.0), LONG) is None
    # a limit below the short silence: one check only
    assert failover.next_check(row, at(row, 0.1), LIMIT) == pytest.approx(LIMIT - 0.1)


def test_the_planner_says_when_the_next_silence_counts(world):
    """The daemon runs a pass then (daemons/sqldb.py): not at its next whole second."""
    nodes, instance = three(world, sync=1)
    clock = [now()]
    planner = Planner(world.store, world.settings, clock=lambda: clock[0])
    planner.pass_once()
    assert planner.next_due is None         # no report yet: nothing to count
    row = world.report(nodes[0], instance, role="primary")
    clock[0] = at(row, 0.1)
    planner.pass_once()
    assert planner.next_due == pytest.approx(LIMIT - 0.1)
    clock[0] = at(row, LIMIT + 0.1)         # lost (a wait: the replicas never reported)
    planner.pass_once()
    assert planner.next_due is None
