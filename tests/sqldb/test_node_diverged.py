"""A replica ahead of the replica promoted in its place (it holds WAL the new primary never
had: plan promoted a replica whose report was fresh while this one's was not) cannot
follow the new timeline; the driver sees it and rewinds it like an old primary."""

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
    assert code == 0, out
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
    assert result["value"]["streaming_from"] == n2.address
    assert "rejoined by pg_rewind onto 127.0.0.22" in caplog.text
    assert psql(n2.address, inst.port, "writer", PASSWORD,
                "INSERT INTO rows VALUES (4)", db="app")[0] == 0
    eventually(lambda: rows(inst, n3) == {1, 4}, 30, "n3 follows n2's timeline")
