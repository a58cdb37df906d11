"""Crash safety and multi-process correctness of the store, with real processes."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from tinydb import TinyDB

from state import Store
from tests.conftest import ROOT

WRITER = os.path.join(os.path.dirname(__file__), "writer.py")


def spawn(state_dir, mode, count, *extra, stdin=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, WRITER, str(state_dir), mode, str(count),
                             *map(str, extra)],
                            stdin=stdin, stdout=subprocess.PIPE, text=True, env=env)


# (mode, journal size past which the child compacts): the default, then compactions every
# few writes so that kills land inside them, then long batch lines that a kill can tear
KILL_CASES = [("insert", None), ("insert", 4096), ("batch", 16384)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode,compact_min", KILL_CASES)
def test_sigkill_at_random_moment_loses_no_acknowledged_write(tmp_path, mode, compact_min):
    rng = random.Random(20261121)
    acknowledged = set()
    extra = [compact_min] if compact_min else []
    for round_no in range(15):
        child = spawn(tmp_path, mode, 100000, *extra)
        first = child.stdout.readline().strip()    # the child is writing now
        acknowledged.add(first)
        time.sleep(rng.uniform(0.0, 0.25))
        child.send_signal(signal.SIGKILL)
        # every line printed before the kill was acknowledged by insert()
        acknowledged.update(line.strip() for line in child.stdout if len(line.strip()) == 36)
        child.wait()
        # a fresh process (fresh cache) loads base and journal and finds every acknowledged
        # write, and no record twice
        fresh = Store(tmp_path).collection("things")
        records = fresh.records()
        stored = {r["uuid"] for r in records}
        assert len(stored) == len(records)
        missing = acknowledged - stored
        assert not missing, f"round {round_no}: {len(missing)} acknowledged writes lost"
        # the base is a valid TinyDB database at any moment, and holds everything once
        # compacted
        assert len(TinyDB(fresh.path).table("things")) <= len(stored)
        if round_no % 5 == 4:
            fresh.compact()
            assert len(TinyDB(fresh.path).table("things")) == len(stored)
    assert len(acknowledged) > 20
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    Store(tmp_path).collection("things")   # opening under the lock sweeps dead temp files
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")], leftovers


# None: the default; 4096: the children compact every few writes, racing each other's
# compactions, appends and full loads
COMPACTIONS = [None, 4096]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("compact_min", COMPACTIONS)
def test_four_processes_inserting_at_once_lose_nothing(tmp_path, compact_min):
    extra = [compact_min] if compact_min else []
    children = [spawn(tmp_path, "insert", 500, *extra) for _ in range(4)]
    outputs = [c.communicate()[0].split() for c in children]
    assert all(c.returncode == 0 for c in children)
    acknowledged = {u for out in outputs for u in out if u != "done"}
    assert len(acknowledged) == 2000
    records = Store(tmp_path).collection("things").records()
    assert len(records) == 2000
    assert {r["uuid"] for r in records} == acknowledged


@pytest.mark.timeout(180)
@pytest.mark.parametrize("compact_min", COMPACTIONS)
def test_four_processes_compare_and_set_one_counter(tmp_path, compact_min):
    counter = Store(tmp_path).collection("counter")
    uuid = counter.insert({"n": 0})["uuid"]
    extra = [compact_min] if compact_min else []
    children = [spawn(tmp_path, "cas", 200, *extra) for _ in range(4)]
    for c in children:
        c.communicate()
        assert c.returncode == 0
    final = Store(tmp_path).collection("counter").require(uuid)
    assert final["n"] == 800
    assert final["revision"] == 801


_DIE_BEFORE_BUMP = """
import os, sys
from state import Store
from state.lock import KindLock
things = Store(sys.argv[1]).collection("things")
things.records()
print("ready", flush=True)
sys.stdin.readline()
# dies after its journal line is on disk, before the generation moves
KindLock.bump_generation = lambda self: os._exit(9)
things.insert({"name": "orphan"})
"""


def test_a_reader_sees_the_line_of_a_writer_killed_before_its_bump(tmp_path):
    """Readers skip the journal's stat while the lock file says no writer is inside
    (issue 11); a writer killed inside leaves that mark set, so the line it made durable
    is still seen, as it was when every read looked at the journal."""
    reader = Store(str(tmp_path)).collection("things")
    reader.insert({"name": "first"})
    assert [r["name"] for r in reader.records()] == ["first"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    child = subprocess.Popen([sys.executable, "-c", _DIE_BEFORE_BUMP, str(tmp_path)],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    # whatever the child's opening moved is read now: from here the generation stays
    assert [r["name"] for r in reader.records()] == ["first"]
    generation = reader.lock.generation()
    child.communicate("go\n", timeout=60)
    assert child.returncode == 9
    assert reader.lock.generation() == generation
    assert sorted(r["name"] for r in reader.records()) == ["first", "orphan"]
    # the next write clears the mark; another process then sees it by the generation
    other = Store(str(tmp_path)).collection("things")
    assert len(other.records()) == 2
    reader.insert({"name": "third"})
    assert reader.lock.state()[1] is True
    assert sorted(r["name"] for r in other.records()) == ["first", "orphan", "third"]
