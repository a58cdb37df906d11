"""Three nodes of one instance with one synchronous replica, on real PostgreSQL: streaming,
the quorum, then the failover primitives the contract gives the node (promote, follow a
moved primary, pg_rewind of the old primary)."""

import logging
import os
import threading

import pytest

from tests.waiting import eventually

from . import pgnode
from .pgnode import Instance, Node, free_port, local_sql, psql

base = pgnode.base
ADDRESSES = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
PASSWORD = "writer-password-1"


@pytest.fixture(scope="module")
def three(base):
    nodes = [Node(base, a) for a in ADDRESSES]
    inst = Instance(nodes, free_port(*ADDRESSES), sync=1)
    inst.set_password("writer", PASSWORD)
    inst.databases["app"] = "writer"
    yield nodes, inst
    for n in nodes:
        n.remove(inst.item(n))


def reports(nodes, inst):
    """Each node's fresh report (a heartbeat or a change), by node."""
    out = {}
    for n in nodes:
        n.driver.states[inst.item(n)["uuid"]].reported_at = 0.0   # due now
        got = n.tick()
        out[n] = got[inst.item(n)["uuid"]]
    return out


def write(inst, node, *values):
    sql = "CREATE TABLE IF NOT EXISTS rows (x int PRIMARY KEY); " + "; ".join(
        f"INSERT INTO rows VALUES ({v})" for v in values)
    code, out = psql(node.address, inst.port, "writer", PASSWORD, sql, db="app")
    assert code == 0, out


def rows(inst, node):
    """The set of rows on `node`."""
    code, out = psql(node.address, inst.port, "writer", PASSWORD,
                     "SELECT coalesce(string_agg(x::text, ','), '') FROM rows", db="app")
    if code != 0:
        assert 'relation "rows" does not exist' in out, out     # not replayed there yet
        return None
    return {int(x) for x in out.split(",") if x}


def test_replicas_stream_with_a_quorum(three):
    nodes, inst = three
    n1, n2, n3 = nodes
    result = inst.apply(n1)
    assert result["status"] == "ACTIVE", result
    for n in (n2, n3):
        result = inst.apply(n)
        assert result["status"] == "ACTIVE", result
        v = result["value"]
        assert v["role"] == "replica" and v["streaming_from"] == n1.address
        assert v["users"] == {} and v["databases"] == {}
        assert v["timeline"] == 1
    conf = local_sql(n1, inst.uuid, inst.port, "SHOW synchronous_standby_names")
    assert conf == f'ANY 1 ("{min(n2.name, n3.name)}", "{max(n2.name, n3.name)}")'
    got = eventually(lambda: (lambda r: r if sorted(r[n1]["value"]["sync_standbys"]) ==
                              sorted([n2.name, n3.name]) else None)(reports(nodes, inst)),
                     30, "both replicas in the primary's quorum")
    assert got[n1]["status"] == "ACTIVE"
    write(inst, n1, 1, 2, 3)
    for n in (n2, n3):
        eventually(lambda: rows(inst, n) == {1, 2, 3}, 30, f"rows on {n.address}")
    # the replicas' positions follow the primary's
    primary_lsn = reports(nodes, inst)[n1]["value"]["lsn_int"]
    eventually(lambda: all(r["value"]["lsn_int"] >= primary_lsn
                           for r in reports(nodes, inst).values()), 30, "replicas caught up")
    # the same items again restart nothing
    pids = [n.postmaster(inst.uuid, inst.port) for n in nodes]
    for n in nodes:
        assert inst.apply(n)["status"] == "ACTIVE"
    assert [n.postmaster(inst.uuid, inst.port) for n in nodes] == pids


def test_a_commit_waits_for_the_quorum(three):
    """With both replicas stopped a commit on the primary does not return: ANY 1."""
    nodes, inst = three
    n1, n2, n3 = nodes
    for n in (n2, n3):
        pgnode.pg.stop(n.cluster(inst.uuid, inst.port), "fast")
    client = threading.Thread(target=lambda: done.append(psql(
        n1.address, inst.port, "writer", PASSWORD, "INSERT INTO rows VALUES (100)",
        db="app")))
    done = []
    client.start()
    waiting = eventually(lambda: local_sql(
        n1, inst.uuid, inst.port, "SELECT pid FROM pg_stat_activity "
        "WHERE usename = 'writer' AND wait_event = 'SyncRep'"), 30,
        "the commit waiting for a synchronous standby")
    assert not done
    local_sql(n1, inst.uuid, inst.port, f"SELECT pg_cancel_backend({waiting})")
    client.join(30)
    assert "canceling wait for synchronous replication" in done[0][1], done
    for n in (n2, n3):
        eventually(lambda: (n.tick().get(inst.item(n)["uuid"]) or {}).get("status")
                   == "ACTIVE", 60, f"{n.address} started again by the tick")
    eventually(lambda: (rows(inst, n2) or set()) >= {1, 2, 3, 100}, 30, "replica back")


def test_failover_promote_follow_rewind(three, caplog):
    caplog.set_level(logging.INFO, logger="appliance.sqldb.node")
    nodes, inst = three
    n1, n2, n3 = nodes
    write(inst, n1, 4, 5)
    committed = rows(inst, n1)
    n1.kill(inst.uuid, inst.port)
    # the replicas still run in their role: ACTIVE, saying they stream nothing
    lone = eventually(lambda: (lambda r: r if r["value"]["streaming_from"] is None else None)(
        reports([n3], inst)[n3]), 30, "n3 no longer streaming")
    assert lone["status"] == "ACTIVE" and lone["value"]["role"] == "replica"
    assert lone["reason"].startswith(f"not streaming from {n1.address}")
    # plan's decision: n2 is the new primary, epoch + 1
    inst.failover(n2)
    result = inst.apply(n2)
    assert result["status"] == "ACTIVE", result
    v = result["value"]
    assert v["role"] == "primary" and v["epoch"] == 1 and v["timeline"] == 2
    assert v["users"] == {"writer": "ok"} and v["databases"] == {"app": "ok"}
    result = inst.apply(n3)
    assert result["status"] == "ACTIVE", result
    assert result["value"]["streaming_from"] == n2.address
    assert rows(inst, n2) == committed
    eventually(lambda: rows(inst, n3) == committed, 30, "n3 has every committed row")
    # the new primary's quorum is the others: n3 streams, n1 is down
    conf = local_sql(n2, inst.uuid, inst.port, "SHOW synchronous_standby_names")
    assert conf == f'ANY 1 ("{min(n1.name, n3.name)}", "{max(n1.name, n3.name)}")'
    write(inst, n2, 6)
    eventually(lambda: rows(inst, n3) == committed | {6}, 30, "n3 follows n2")
    # the old primary back, as a replica of the new one: pg_rewind
    result = inst.apply(n1)
    assert result["status"] == "ACTIVE", result
    v = result["value"]
    assert v["role"] == "replica" and v["streaming_from"] == n2.address and v["epoch"] == 1
    assert "rejoined by pg_rewind" in caplog.text
    assert "a new base backup instead" not in caplog.text
    eventually(lambda: rows(inst, n1) == committed | {6}, 30, "n1 has every row")
    write(inst, n2, 7)
    for n in (n1, n3):
        eventually(lambda: rows(inst, n) == committed | {6, 7}, 30, f"{n.address} streams")
    got = eventually(lambda: (lambda r: r if sorted(r[n2]["value"]["sync_standbys"]) ==
                              sorted([n1.name, n3.name]) else None)(reports(nodes, inst)),
                     30, "both replicas in the new primary's quorum")
    assert {n.address: r["value"]["role"] for n, r in got.items()} == {
        n1.address: "replica", n2.address: "primary", n3.address: "replica"}
    assert all(r["status"] == "ACTIVE" and r["value"]["timeline"] == 2 for r in got.values())


def test_no_password_in_any_log(three, base, caplog):
    """The reserved roles' clear passwords are only in each node's passfile; the users'
    verifiers only in the item and the catalog: never in a server log or the driver's."""
    secrets = [pgnode.REPLICATOR_PASSWORD, pgnode.ADMIN_PASSWORD, *three[1].users.values()]
    checked = 0
    for d, _, files in os.walk(base):
        for name in files:
            path = os.path.join(d, name)
            if name == "pgpass" or "/data" in path[len(base):] or not os.path.isfile(path):
                continue
            with open(path, errors="replace") as f:
                text = f.read()
            checked += name == "postgresql.log"
            assert not any(s in text for s in secrets), path
    assert checked >= 3
