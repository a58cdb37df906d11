"""The driver's failures: each an ERROR with a reason, retried by the tick where a retry can
help; and removal."""

import os
import shutil
import socket
import subprocess
import types
import uuid

import pytest

from appliance.agent.host import Host
from appliance.sqldb import node as sqldb_node
from tests.waiting import eventually

from . import pgnode
from .pgnode import Instance, Node, free_port, psql

base = pgnode.base
REPLICA, PRIMARY = "127.0.0.27", "127.0.0.29"


def test_unreachable_primary_then_retried_by_the_tick(base):
    replica, primary = Node(base, REPLICA), Node(base, PRIMARY)
    inst = Instance([primary, replica], free_port(REPLICA, PRIMARY), sync=1)
    inst.set_password("late", "late-password-1")
    try:
        result = inst.apply(replica)        # nothing listens on the primary's address yet
        # a primary still being made: the replica waits for it (IN_PROGRESS, not ERROR)
        assert result["status"] == "IN_PROGRESS"
        assert result["reason"].startswith(f"waiting for the primary {PRIMARY}:")
        assert "pg_basebackup failed: " in result["reason"] and "refused" in result["reason"]
        v = result["value"]
        assert v["role"] == "stopped" and v["running"] is False and v["epoch"] == 0
        # no half-made data directory is left to look like a cluster
        c = replica.cluster(inst.uuid, inst.port)
        assert not os.path.exists(c.data) and not os.path.exists(c.data + ".new")
        # the tick retries on its own once the primary is there
        assert inst.apply(primary)["status"] == "ACTIVE"
        got = eventually(lambda: (replica.tick().get(inst.item(replica)["uuid"]) or {})
                         .get("status") == "ACTIVE", 60, "the replica made by a retry")
        assert got
        assert psql(PRIMARY, inst.port, "late", "late-password-1", "SELECT 1") == (0, "1")
        assert psql(REPLICA, inst.port, "late", "late-password-1",
                    "SELECT pg_is_in_recovery()") == (0, "t")
    finally:
        for n in (replica, primary):
            n.remove(inst.item(n))


def test_a_primary_that_never_comes_is_an_error_after_the_wait(base, monkeypatch):
    """The wait for a primary being made is bounded: past PRIMARY_WAIT_SECONDS the replica
    is ERROR (and retried with the back-off, not at every tick)."""
    monkeypatch.setattr(sqldb_node, "PRIMARY_WAIT_SECONDS", 0.0)
    replica, primary = Node(base, REPLICA), Node(base, PRIMARY)
    inst = Instance([primary, replica], free_port(REPLICA, PRIMARY), sync=1)
    try:
        assert inst.apply(replica)["status"] == "IN_PROGRESS"
        got = replica.tick()[inst.item(replica)["uuid"]]
        assert got["status"] == "ERROR"
        assert got["reason"].startswith(f"waiting for the primary {PRIMARY}:")
        assert got["reason"].endswith("(for more than 0 s)")
        assert replica.driver.retry.failing(inst.item(replica)["uuid"])
        c = replica.cluster(inst.uuid, inst.port)
        assert not os.path.exists(c.data) and not os.path.exists(c.data + ".new")
    finally:
        replica.remove(inst.item(replica))


def test_remove_stops_and_deletes(base):
    node = Node(base, "127.0.0.28")
    inst = Instance([node], free_port("127.0.0.28"))
    assert inst.apply(node)["status"] == "ACTIVE"
    c = node.cluster(inst.uuid, inst.port)
    pid = node.postmaster(inst.uuid, inst.port)
    node.remove(inst.item(node))
    assert not os.path.exists(f"/proc/{pid}") or pgnode.pg.postmaster_pid(c) is None
    assert not os.path.exists(c.base)
    assert node.tick() == {}
    node.remove(inst.item(node))           # again: nothing left, no error


def test_path_outside_the_allowed_roots(base):
    node = Node(base, "127.0.0.26", allowed_roots=("/etc",))
    inst = Instance([node], free_port("127.0.0.26"))
    result = inst.apply(node)
    assert result["status"] == "ERROR"
    assert "outside the allowed roots" in result["reason"]
    assert result["value"]["running"] is False
    assert not os.path.exists(os.path.join(node.root, "var"))
    node.remove(inst.item(node))           # nothing was made: nothing to do


def test_bad_items_are_refused_with_the_field(base):
    node = Node(base, "127.0.0.28")
    inst = Instance([node], free_port("127.0.0.28"))
    cases = [("major", 99, "PostgreSQL 99 is not installed"),
             ("major", 9, "major 9 is not an integer from 10 to 99"),
             ("port", 0, "port 0 is not an integer"),
             ("role", "leader", "role 'leader' is neither primary nor replica"),
             ("hba", ["10.0.0.0/33"], "hba: '10.0.0.0/33' is not a CIDR"),
             ("instance", "../../etc", "is not a uuid"),
             ("self", {"node": node.uuid, "host": "127.0.0.28", "name": "n'; x"},
              "self: name")]
    for key, bad, said in cases:
        item = inst.item(node)
        item["value"][key] = bad
        result = node.driver.apply(item, None)
        assert result["status"] == "ERROR" and said in result["reason"], (key, result)
    assert not os.path.exists(os.path.join(node.root, "var", "lib", "appliance", "sqldb",
                                           inst.uuid, "data"))


def test_a_data_directory_of_another_major_is_left_alone(base):
    node = Node(base, "127.0.0.28")
    inst = Instance([node], free_port("127.0.0.28"))
    try:
        assert inst.apply(node)["status"] == "ACTIVE"
        c = node.cluster(inst.uuid, inst.port)
        with open(os.path.join(c.data, "PG_VERSION"), "w") as f:
            f.write("14\n")
        inst.ram_mb += 1                    # another item: applied again
        result = inst.apply(node)
        assert result["status"] == "ERROR"
        assert "the data directory is PostgreSQL 14" in result["reason"]
    finally:
        with open(os.path.join(node.cluster(inst.uuid, inst.port).data, "PG_VERSION"),
                  "w") as f:
            f.write("15\n")
        node.remove(inst.item(node))


def test_data_of_a_major_without_binaries_stays_stopped_and_says_what_to_do(base):
    """The upgrade case (docs/sqldb.md, "Upgrading PostgreSQL"): an instance made on a
    Debian 12 appliance (PostgreSQL 15) whose state disk a Debian 13 root (17 only) now
    runs. Here 13 stands for the major that this machine has no binaries of: the item
    asks for it, the data directory is of it; the driver reports ERROR with what to do,
    and neither starts anything nor writes to the data, on apply and on every tick."""
    missing = 13
    assert missing not in pgnode.pg.installed_majors()
    node = Node(base, "127.0.0.28")
    inst = Instance([node], free_port("127.0.0.28"))
    inst.major = missing
    c = pgnode.pg.Cluster(node.host, inst.uuid, missing, inst.port, node.address)
    os.makedirs(c.data, mode=0o700)
    kept = {"PG_VERSION": f"{missing}\n", "postgresql.conf": "# the old major's\n"}
    for name, text in kept.items():
        with open(os.path.join(c.data, name), "w") as f:
            f.write(text)
    try:
        for result in (inst.apply(node), *node.tick().values()):
            assert result["status"] == "ERROR", result
            reason = result["reason"]
            assert reason.startswith(f"the data directory is PostgreSQL {missing}, and this "
                                     f"node has no PostgreSQL {missing} binaries"), reason
            assert "stays stopped" in reason and "pg_upgrade" in reason
            assert 'docs/sqldb.md, "Upgrading PostgreSQL"' in reason
            assert result["value"]["running"] is False
        assert sorted(os.listdir(c.data)) == sorted(kept)
        for name, text in kept.items():
            with open(os.path.join(c.data, name)) as f:
                assert f.read() == text
        # nothing made beside the data (run and log directories, passfile) nor started
        assert sorted(os.listdir(c.base)) == ["data"]
        assert pgnode.pg.postmaster_pid(c) is None
    finally:
        node.remove(inst.item(node))
    assert not os.path.exists(c.base)


def test_the_unit_is_valid_for_systemd(tmp_path):
    """The unit a node with systemd gets, checked by systemd's own parser (no systemd
    runs here to start it)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    host = Host(root="/", state_dir=str(tmp_path))
    instance = str(uuid.uuid4())
    c = pgnode.pg.Cluster(host, instance, pgnode.MAJOR, 5432, "10.0.0.5")
    spec = types.SimpleNamespace(instance=instance)
    path = tmp_path / sqldb_node.UNIT.format(instance=instance)
    path.write_text(sqldb_node.unit_text(spec, c))
    done = subprocess.run(["systemd-analyze", "verify", str(path)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert done.returncode == 0, done.stdout
    text = path.read_text()
    assert f"PIDFile={c.pid_file}\n" in text and "User=postgres\n" in text
    assert f"-D {c.data} " in text and "WantedBy=multi-user.target" in text


def test_a_start_that_fails_says_why_and_is_retried(base):
    node = Node(base, "127.0.0.28")
    inst = Instance([node], free_port("127.0.0.28"))
    taken = socket.socket()
    taken.bind(("127.0.0.28", inst.port))
    taken.listen()
    try:
        result = inst.apply(node)
        assert result["status"] == "ERROR"
        assert result["reason"].startswith("PostgreSQL did not start: ")
        assert 'could not bind IPv4 address "127.0.0.28": Address already in use' \
            in result["reason"]
        assert result["value"]["running"] is False
        taken.close()
        eventually(lambda: (node.tick().get(inst.item(node)["uuid"]) or {})
                   .get("status") == "ACTIVE", 60, "started by a retry of the tick")
    finally:
        taken.close()
        node.remove(inst.item(node))


def test_a_prefix_postgres_cannot_reach_is_said_clearly(base):
    private = os.path.join(base, "p")
    os.mkdir(private, 0o700)
    node = Node(private, "127.0.0.26")
    inst = Instance([node], free_port("127.0.0.26"))
    result = inst.apply(node)
    assert result["status"] == "ERROR"
    assert result["reason"].startswith("the OS user postgres cannot reach "), result
    assert f"{private} is mode 0700" in result["reason"]
    node.remove(inst.item(node))
