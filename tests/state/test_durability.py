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


def spawn(state_dir, mode, count):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, WRITER, str(state_dir), mode, str(count)],
                            stdout=subprocess.PIPE, text=True, env=env)


@pytest.mark.timeout(180)
def test_sigkill_at_random_moment_loses_no_acknowledged_write(tmp_path):
    rng = random.Random(20261121)
    acknowledged = set()
    for round_no in range(20):
        child = spawn(tmp_path, "insert", 100000)
        first = child.stdout.readline().strip()    # the child is writing now
        acknowledged.add(first)
        time.sleep(rng.uniform(0.0, 0.25))
        child.send_signal(signal.SIGKILL)
        # every line printed before the kill was acknowledged by insert()
        acknowledged.update(line.strip() for line in child.stdout if len(line.strip()) == 36)
        child.wait()
        # a fresh process (fresh cache) loads the file and finds every acknowledged write
        stored = {r["uuid"] for r in Store(tmp_path).collection("things").records()}
        missing = acknowledged - stored
        assert not missing, f"round {round_no}: {len(missing)} acknowledged writes lost"
        # and the file is a valid TinyDB database
        assert len(TinyDB(Store(tmp_path).path_of("things")).table("things")) == len(stored)
    assert len(acknowledged) > 20
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    Store(tmp_path).collection("things")   # opening under the lock sweeps dead temp files
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")], leftovers


@pytest.mark.timeout(180)
def test_four_processes_inserting_at_once_lose_nothing(tmp_path):
    children = [spawn(tmp_path, "insert", 500) for _ in range(4)]
    outputs = [c.communicate()[0].split() for c in children]
    assert all(c.returncode == 0 for c in children)
    acknowledged = {u for out in outputs for u in out if u != "done"}
    assert len(acknowledged) == 2000
    records = Store(tmp_path).collection("things").records()
    assert len(records) == 2000
    assert {r["uuid"] for r in records} == acknowledged


@pytest.mark.timeout(180)
def test_four_processes_compare_and_set_one_counter(tmp_path):
    counter = Store(tmp_path).collection("counter")
    uuid = counter.insert({"n": 0})["uuid"]
    children = [spawn(tmp_path, "cas", 200) for _ in range(4)]
    for c in children:
        c.communicate()
        assert c.returncode == 0
    final = Store(tmp_path).collection("counter").require(uuid)
    assert final["n"] == 800
    assert final["revision"] == 801
