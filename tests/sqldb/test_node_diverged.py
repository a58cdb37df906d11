"""Replicas that cannot follow their primary by streaming, which the driver sees in their
logs: one ahead of the replica promoted in its place (it holds WAL the new primary never
had: plan promoted a replica whose report was fresh while this one's was not) is rewound
like an old primary; one behind the WAL its primary keeps is copied anew."""

import logging

import pytest

from tests.waiting import eventually

from . import pgnode
from .pgnode import Instance, Node, free_port, psql

base = pgnode.base
ADDRESSES = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
PASSWORD = "writer-password-2"


@pytest.fixture
def three(base):
    nodes = [Node(base, a) for a in ADDRESSES]
    inst = Instance(nodes, free_port(*ADDRESSES), sync=1)
    inst.set_password("writer", PASSWORD)
    inst.databases["app"] = "writer"
    yield nodes, inst
    for n in nodes:
        n.remove(inst.item(n))


def rows(inst, node):
    code, out = psql(node.address, inst.port, "writer", PASSWORD,
                     "SELECT coalesce(string_agg(x::text, ','), '') FROM rows", db="app")
    if code != 0:
        assert 'relation "rows" does not exist' in out, out     # not replayed there yet
        return None
    return {int(x) for x in out.split(",") if x}


def test_a_replica_ahead_of_the_new_primary_is_rewound(three, caplog):
    caplog.set_level(logging.INFO, logger="appliance.sqldb.node")
    nodes, inst = three
    n1, n2, n3 = nodes
    for n in nodes:
        assert inst.apply(n)["status"] == "ACTIVE"
    assert psql(n1.address, inst.port, "writer", PASSWORD,
                "CREATE TABLE rows (x int); INSERT INTO rows VALUES (1)", db="app")[0] == 0
    eventually(lambda: rows(inst, n2) == {1}, 30, "n2 has row 1")
    # n2 falls behind (stopped), n3 acknowledges rows 2 and 3 alone, the primary dies
    pgnode.pg.stop(n2.cluster(inst.uuid, inst.port), "fast")
    assert psql(n1.address, inst.port, "writer", PASSWORD,
                "INSERT INTO rows VALUES (2), (3)", db="app")[0] == 0
    eventually(lambda: rows(inst, n3) == {1, 2, 3}, 30, "n3 has rows 2 and 3")
    n1.kill(inst.uuid, inst.port)
    inst.failover(n2)
    result = inst.apply(n2)
    assert result["status"] == "ACTIVE" and result["value"]["role"] == "primary", result
    assert rows(inst, n2) == {1}
    # n3 holds WAL of timeline 1 past where n2's timeline 2 forked off: rewound onto n2
    result = inst.apply(n3)
    assert result["status"] == "ACTIVE", result
    if result["value"]["streaming_from"] != n2.address:
        # apply's wait for streaming is bounded (STREAM_WAIT_SECONDS, 15 s), and a rewind
        # and start on a busy machine took longer: the tick reports it once it streams
        eventually(lambda: (n3.tick().get(inst.item(n3)["uuid"]) or {}).get(
            "value", {}).get("streaming_from") == n2.address, 90, "n3 streaming from n2")
    assert "rejoined by pg_rewind onto 127.0.0.22" in caplog.text
    assert psql(n2.address, inst.port, "writer", PASSWORD,
                "INSERT INTO rows VALUES (4)", db="app")[0] == 0
    eventually(lambda: rows(inst, n3) == {1, 4}, 30, "n3 follows n2's timeline")


def test_a_replica_behind_the_kept_wal_is_copied_anew(base, monkeypatch, caplog):
    """A replica away for longer than the primary keeps WAL for (wal_keep_size, 0 here)
    cannot catch up by streaming: the driver sees it and makes a new base backup."""
    caplog.set_level(logging.INFO, logger="appliance.sqldb.node")
    monkeypatch.setattr(pgnode.pg, "WAL_KEEP_SIZE", "0")
    n1, n2 = nodes = [Node(base, a) for a in ADDRESSES[:2]]
    inst = Instance(nodes, free_port(*ADDRESSES[:2]), sync=0)
    inst.set_password("writer", PASSWORD)
    inst.databases["app"] = "writer"
    try:
        for n in nodes:
            assert inst.apply(n)["status"] == "ACTIVE"
        assert psql(n1.address, inst.port, "writer", PASSWORD,
                    "CREATE TABLE rows (x int); INSERT INTO rows VALUES (1)", db="app")[0] == 0
        eventually(lambda: rows(inst, n2) == {1}, 30, "n2 has row 1")
        pgnode.pg.stop(n2.cluster(inst.uuid, inst.port), "fast")
        for x in (2, 3, 4):
            assert psql(n1.address, inst.port, "writer", PASSWORD,
                        f"INSERT INTO rows VALUES ({x})", db="app")[0] == 0
            pgnode.local_sql(n1, inst.uuid, inst.port, "SELECT pg_switch_wal()")
        for _ in range(2):
            pgnode.local_sql(n1, inst.uuid, inst.port, "CHECKPOINT")
        # the tick starts n2 again; it cannot stream, and is copied anew
        got = eventually(lambda: (lambda r: r if r and r["value"]["streaming_from"] ==
                                  n1.address else None)(n2.tick().get(inst.item(n2)["uuid"])),
                         90, "n2 streaming again")
        assert got["status"] == "ACTIVE"
        with open(n2.cluster(inst.uuid, inst.port).log_file, errors="replace") as f:
            assert "has already been removed" in f.read()
        assert "copied anew from 127.0.0.21" in caplog.text
        eventually(lambda: rows(inst, n2) == {1, 2, 3, 4}, 30, "n2 has every row")
    finally:
        for n in nodes:
            n.remove(inst.item(n))
