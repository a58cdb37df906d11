"""The real daemon process (`python -m daemons.sqldb`) over a state dir: it picks the first
primary on its own, and writes a failover after the primary's row stops being refreshed
while the replicas' rows go on (written as an agent's report is stored: no event comes
from the lost primary, only the daemon's one-second pass finds it)."""

import os
import subprocess
import sys
import threading
import time

import pytest

from state.collection import parse_time
from tests import processes
from tests.conftest import ROOT, RUN_LOG_DIR
from tests.waiting import eventually

from .planworld import World

LIMIT = 1.0


@pytest.fixture
def world(tmp_path):
    return World(tmp_path / "state", sqldb_failover_seconds=LIMIT)


@pytest.fixture
def daemon(world):
    log = open(os.path.join(RUN_LOG_DIR, f"sqldb-{os.getpid()}-{time.time_ns()}.log"), "wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env.update(PYTHONPATH=ROOT, APPLIANCE_STATE_DIR=world.store.directory,
               APPLIANCE_CONFIG=os.devnull, APPLIANCE_LOG_LEVEL="DEBUG",
               APPLIANCE_SQLDB_FAILOVER_SECONDS=str(LIMIT))
    proc = subprocess.Popen([sys.executable, "-m", "daemons.sqldb"], cwd=ROOT, env=env,
                            stdout=log, stderr=log)
    log.close()
    yield proc
    processes.stop(proc, 5)


class Heartbeat:
    """Rewrites some members' rows every 0.2 s, as their drivers' ticks would."""

    def __init__(self, world, instance):
        self.world, self.instance = world, instance
        self.beating = {}           # node uuid -> (node, value fields)
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def beat(self, node, **value):
        with self.lock:
            self.beating[node["uuid"]] = (node, value)

    def stop_beating(self, node):
        with self.lock:
            self.beating.pop(node["uuid"], None)

    def run(self):
        while not self.stopped.wait(0.2):
            with self.lock:
                beating = list(self.beating.values())
            for node, value in beating:
                self.world.report(node, self.instance, **value)


def test_the_daemon_picks_a_primary_and_fails_over(world, daemon):
    nodes = [world.add_node(i, f"127.0.0.{20 + i}") for i in (1, 2, 3)]
    instance = world.add_instance(nodes, sync=1)
    got = eventually(lambda: world.instance(instance)["primary"], 20, "the first primary")
    assert got == nodes[0]["uuid"]
    assert eventually(lambda: world.instance(instance)["endpoint"], 20, "the endpoint")
    heart = Heartbeat(world, instance)
    heart.beat(nodes[0], role="primary", lsn_int=30)
    heart.beat(nodes[1], lsn_int=30, streaming_from="127.0.0.21")
    heart.beat(nodes[2], lsn_int=20, streaming_from="127.0.0.21")
    heart.thread.start()
    try:
        time.sleep(3 * LIMIT)
        assert world.instance(instance)["epoch"] == 0, "no failover while the primary beats"
        heart.stop_beating(nodes[0])
        last = world.row(nodes[0], instance)["updated_at"]
        moved = eventually(lambda: world.instance(instance)["epoch"] == 1 and
                           world.instance(instance), 30, "the failover")
    finally:
        heart.stopped.set()
        heart.thread.join(2)
    assert moved["primary"] == nodes[1]["uuid"]
    assert moved["endpoint"] == f"{instance['uuid']}.sqldb.appliance.internal"
    took = (parse_time(moved["updated_at"]) - parse_time(last)).total_seconds()
    print(f"instance written {took:.2f} s after the primary's last row (limit {LIMIT} s)")
    assert daemon.poll() is None
