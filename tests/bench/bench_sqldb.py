"""DBaaS: instance create -> ACTIVE (1 and 3 nodes), failover with no committed row lost,
and pgbench through the endpoint against pgbench straight to the primary.

    python -m tests.bench sqldb

Everything real, as in tests/sqldb/test_e2e.py (tests/sqldb/world.py): the API, the sqldb
daemon, our DNS server and HW nodes, each a real agent process running Debian's
PostgreSQL on its own loopback address.

- create: POST -> the instance ACTIVE (read every 50 ms), ROUNDS times for 1 node and for
  3 nodes with one synchronous replica, each deleted after (the delete is timed too).
- timeline: one more create of each size, step by step: the instance's record and each
  node's report as the API stores them (read every 10 ms) and the agents' log lines of
  the driver (the apply's start, initdb, base backup, PostgreSQL started, streaming), in
  seconds from the POST. Where the time goes; printed, not summed.
- failover: a writer commits one row per transaction through the endpoint's address,
  reconnecting through the endpoint when a connection fails, and keeps the ids PostgreSQL
  acknowledged. The primary's node is lost (agent and PostgreSQL SIGKILLed). Printed: to
  the promotion (the daemon's write), to the first commit on the new primary, then
  whether every acknowledged id is there; the old node then rejoins (pg_rewind) and the
  time to its streaming is printed, and how many failovers the round made (1: no false
  one). The detection part is the setting sqldb_failover_seconds (FAILOVER_SECONDS here),
  or 3 s when the replicas lost the primary too (docs/sqldb-failover.md, "Detection").

Knobs: BENCH_SQLDB_ROUNDS (3), BENCH_SQLDB_FAILOVERS (3), BENCH_SQLDB_PGBENCH_SECONDS (8),
BENCH_SQLDB_PGBENCH_PAIRS (3).
  The first round is also printed step by step: the primary's last report before the
  loss, the replicas' reports, the daemon's promotion, the agents' driver lines, the first
  commit on the new primary.
- pgbench: select-only (-S), 4 clients, PGBENCH_SECONDS each, sides alternated:
  through the endpoint name (our DNS server on port 53 of its own loopback address, and
  pgbench in a private mount namespace whose /etc/resolv.conf names it, so the system
  resolver asks our server) and straight to the primary's address. With one connection per
  client (the name is resolved once) and with -C (a new connection per transaction, so a
  lookup per transaction: what the endpoint costs at most).
"""

import datetime
import os
import re
import subprocess
import threading
import time

from . import median, note, table, title

ROUNDS = int(os.environ.get("BENCH_SQLDB_ROUNDS", "3"))
FAILOVERS = int(os.environ.get("BENCH_SQLDB_FAILOVERS", "3"))
PGBENCH_SECONDS = int(os.environ.get("BENCH_SQLDB_PGBENCH_SECONDS", "8"))
PGBENCH_PAIRS = int(os.environ.get("BENCH_SQLDB_PGBENCH_PAIRS", "3"))
FAILOVER_SECONDS = 5
ADDRESSES = ("127.0.0.41", "127.0.0.42", "127.0.0.43")
DNS_ADDRESS = "127.0.0.40"
USER, DATABASE, PASSWORD = "bench_user", "bench_db", "bench-Pass-1"


def fmt(values):
    return f"{min(values):.2f} / {median(values):.2f} / {max(values):.2f}"


def create_rounds(world, nodes, sync, rounds):
    to_active, to_gone = [], []
    for i in range(rounds):
        t0 = time.perf_counter()
        made = world.create_instance(f"bench-{len(nodes)}-{i}", nodes, sync)
        world.wait_status(f"/v1/sqldb/instances/{made['uuid']}", "ACTIVE", "ACTIVE",
                          interval=0.05)
        to_active.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        world.delete_instance(made)
        to_gone.append(time.perf_counter() - t0)
    return to_active, to_gone


class Timeline(threading.Thread):
    """The steps of one create as the store shows them: the instance's primary and status,
    each member's reported status, role, running and streaming_from, with the time each
    changed (read every 10 ms)."""

    def __init__(self, world, uuid, t0):
        super().__init__(daemon=True)
        self.world, self.uuid, self.t0 = world, uuid, t0
        self.names = {n.uuid: f"n{i}" for i, n in enumerate(world.nodes)}
        self.events, self.stopping = [], threading.Event()
        self.events_offset = 0.0

    def run(self):
        last = {}
        instances = self.world.api.store.collection("sqldb_instances")
        while not self.stopping.is_set():
            got = instances.get(self.uuid) or {}
            key = (self.names.get(got.get("primary")), got.get("status"))
            if last.get("instance") != key:
                last["instance"] = key
                reason = (got.get("status_reason") or "")[:60]
                self.add(f"daemon: instance primary={key[0]} {key[1]} {reason}")
            for node in self.world.nodes:
                row = self.world.report(node, self.uuid)
                if row is None:
                    continue
                v = row.get("value") or {}
                key = (row.get("status"), v.get("role"), v.get("running"),
                       v.get("streaming_from"))
                if last.get(node.uuid) != key:
                    last[node.uuid] = key
                    self.add(f"API: {self.names[node.uuid]} reported {key[0]} role={key[1]} "
                             f"running={key[2]} streaming_from={key[3]}")
            time.sleep(0.01)

    def add(self, what):
        self.events.append((time.time() - self.t0, what))


DRIVER_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) agent\[\d+\] \w+ "
                         r"appliance\.(sqldb\.node|agent): (.*)")


def driver_lines(world, t0, t1):
    """The agents' log lines of the driver and of the runner's applies between t0 and t1
    (wall clock), as (seconds from t0, text)."""
    out = []
    for i, node in enumerate(world.nodes):
        with open(node.agent.log_path, errors="replace") as f:
            for line in f:
                m = DRIVER_LINE.match(line)
                if not m:
                    continue
                at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")\
                    .timestamp()
                if t0 - 0.01 <= at <= t1:
                    text = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<uuid>", m.group(3))
                    out.append((at - t0, f"agent n{i}: {text[:90]}"))
    return out


def timeline(world, nodes, sync, name):
    """One create, step by step: [(seconds from the POST, what)]."""
    t0 = time.time()
    made = world.create_instance(name, nodes, sync)
    watch = Timeline(world, made["uuid"], t0)
    watch.start()
    world.wait_status(f"/v1/sqldb/instances/{made['uuid']}", "ACTIVE", "ACTIVE",
                      interval=0.01)
    t1 = time.time()
    time.sleep(0.05)
    watch.stopping.set()
    watch.join()
    world.delete_instance(made)
    steps = sorted([e for e in watch.events if e[0] <= t1 - t0 + 0.01]
                   + driver_lines(world, t0, t1))
    return [[f"{t:.3f}", what] for t, what in steps] + [[f"{t1 - t0:.3f}", "bench: ACTIVE read"]]


class Writer(threading.Thread):
    """Commits one row per transaction through the endpoint until stopped; keeps the ids
    PostgreSQL acknowledged."""

    def __init__(self, world, endpoint, start_id):
        super().__init__(daemon=True)
        self.world, self.endpoint, self.next_id = world, endpoint, start_id
        self.acknowledged, self.failed = [], 0
        self.commits_at = []
        self.stopping = threading.Event()

    def run(self):
        from tests.sqldb.world import psql
        while not self.stopping.is_set():
            addresses = self.world.resolve(self.endpoint)
            if not addresses:
                time.sleep(0.05)
                continue
            done = psql(addresses[0], self.world.port,
                        f"INSERT INTO w (id) VALUES ({self.next_id})", PASSWORD, USER,
                        DATABASE)
            if done.returncode == 0:
                self.acknowledged.append(self.next_id)
                self.commits_at.append((time.perf_counter(), addresses[0]))
                self.next_id += 1
            else:
                self.failed += 1
                time.sleep(0.05)


def prepare(world, instance):
    from tests.sqldb.world import psql
    path = f"/v1/sqldb/instances/{instance['uuid']}"
    user = world.admin.post(path + "/users", {"name": USER, "password": PASSWORD}).json
    world.wait_status(f"{path}/users/{user['uuid']}", "ACTIVE", "user")
    db = world.admin.post(path + "/databases", {"name": DATABASE, "owner": user["uuid"]}).json
    world.wait_status(f"{path}/databases/{db['uuid']}", "ACTIVE", "database")
    host = world.resolve(instance["endpoint"])[0]
    done = psql(host, world.port, "CREATE TABLE w (id int PRIMARY KEY)", PASSWORD, USER,
                DATABASE)
    assert done.returncode == 0, done.stderr


def failover_rounds(world, instance):
    """The rounds' figures, and the first round's steps [(s from the loss, what)]."""
    from state.collection import parse_time
    from tests.sqldb.world import eventually, psql
    out, next_id, steps = [], 0, []
    for round_ in range(FAILOVERS):
        writer = Writer(world, instance["endpoint"], next_id)
        writer.start()
        eventually(lambda: len(writer.acknowledged) >= 20, "20 commits before the loss")
        before = world.instance(instance["uuid"])
        old = world.node(before["primary"])
        heard = world.report(old, instance["uuid"])["updated_at"]
        watch = None
        if round_ == 0:
            watch = Timeline(world, instance["uuid"], time.time())
            watch.start()
        lost_at = time.time()
        lost = time.perf_counter()
        old.lose()
        after = eventually(lambda: (lambda got: got if got["primary"] not in (None, old.uuid)
                                    else None)(world.instance(instance["uuid"])),
                           "promotion", interval=0.02)
        promoted = time.perf_counter() - lost
        new = world.node(after["primary"])
        eventually(lambda: any(a == new.address for _, a in writer.commits_at),
                   "a commit on the new primary", interval=0.02)
        first_commit = next(t for t, a in writer.commits_at if a == new.address) - lost
        if watch is not None:
            watch.stopping.set()
            watch.join()
            watch.events_offset = watch.t0 - lost_at
            end = lost_at + first_commit
            steps = sorted(
                [(parse_time(heard).timestamp() - lost_at,
                  "API: the primary's last report before the loss"),
                 (0.0, "bench: the primary's agent and PostgreSQL SIGKILLed"),
                 (first_commit, "writer: first commit on the new primary")]
                + [(t + watch.events_offset, w) for t, w in watch.events
                   if 0 <= t + watch.events_offset <= first_commit]
                + driver_lines(world, lost_at, end))
        time.sleep(1)
        writer.stopping.set()
        writer.join()
        done = psql(new.address, world.port, "SELECT id FROM w", PASSWORD, USER, DATABASE)
        present = {int(x) for x in done.stdout.split()}
        lost_rows = [i for i in writer.acknowledged if i not in present]
        rejoin_started = time.perf_counter()
        old.agent.start()
        eventually(lambda: ((world.report(old, instance["uuid"]) or {}).get("value") or {})
                   .get("streaming_from") == new.address, "rejoined", interval=0.1)
        rejoined = time.perf_counter() - rejoin_started
        next_id = writer.next_id
        world.wait_status(f"/v1/sqldb/instances/{instance['uuid']}", "ACTIVE", "ACTIVE again")
        # one failover per loss: a second one (the rejoin read as a loss) would show here
        epochs = world.instance(instance["uuid"])["epoch"] - before["epoch"]
        out.append((promoted, first_commit, len(writer.acknowledged), len(lost_rows),
                    writer.failed, rejoined, epochs))
    return out, [[f"{t:.3f}", what] for t, what in steps]


def pgbench(world, host, seconds, connect_each, resolv=None):
    env = {**os.environ, "PGPASSWORD": PASSWORD, "PGSSLMODE": "disable"}
    argv = ["pgbench", "-n", "-S", "-c", "4", "-j", "2", "-T", str(seconds), "-h", host,
            "-p", str(world.port), "-U", USER, DATABASE] + (["-C"] if connect_each else [])
    if resolv:
        argv = ["unshare", "-m", "sh", "-c",
                f"mount --bind {resolv} /etc/resolv.conf && exec \"$@\"", "sh"] + argv
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 60)
    for line in done.stdout.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    raise RuntimeError(f"pgbench: {done.stderr or done.stdout}")


def pgbench_pairs(world, instance):
    primary = world.node(world.instance(instance["uuid"])["primary"]).address
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    subprocess.run(["pgbench", "-i", "-q", "-s", "2", "-h", primary, "-p", str(world.port),
                    "-U", USER, DATABASE], env=env, capture_output=True, check=True)
    resolv = os.path.join(world.base, "resolv.conf")
    with open(resolv, "w") as f:
        f.write(f"nameserver {world.dns_address}\noptions timeout:1 attempts:2\n")
    name = instance["endpoint"]
    rows = []
    for connect_each in (False, True):
        through, direct = [], []
        for i in range(PGBENCH_PAIRS):
            sides = [("name", name, resolv), ("direct", primary, None)]
            for side, host, conf in (sides if i % 2 == 0 else sides[::-1]):
                tps = pgbench(world, host, PGBENCH_SECONDS, connect_each, conf)
                (through if side == "name" else direct).append(tps)
        ratios = [t / d for t, d in zip(through, direct)]
        rows.append(["-C (connect per tx)" if connect_each else "one connection",
                     fmt(through), fmt(direct), fmt(ratios)])
    return rows


def main():
    from tests.sqldb.world import World
    title(f"bench_sqldb: create -> ACTIVE, failover, pgbench through the endpoint; "
          f"HW nodes on {', '.join(ADDRESSES)}, Debian's PostgreSQL 15")
    world = World(ADDRESSES, failover_seconds=FAILOVER_SECONDS, dns_address=DNS_ADDRESS,
                  dns_port=53)
    try:
        world.start()
        one = create_rounds(world, world.nodes[:1], 0, ROUNDS)
        three = create_rounds(world, world.nodes, 1, ROUNDS)
        note(f"\n(a) instance POST -> ACTIVE and DELETE -> data dirs gone, {ROUNDS} rounds "
             f"each (s, min / median / max)")
        table(["nodes", "sync replicas", "create -> ACTIVE", "delete -> gone"],
              [[1, 0, fmt(one[0]), fmt(one[1])], [3, 1, fmt(three[0]), fmt(three[1])]])
        for count, sync in ((1, 0), (3, 1)):
            note(f"\n(a') one more create of {count} node(s), step by step (s from the POST)")
            table(["s", "step"], timeline(world, world.nodes[:count], sync,
                                          f"bench-steps-{count}"))

        instance = world.create_instance("bench-failover", world.nodes, 1)
        instance = world.wait_status(f"/v1/sqldb/instances/{instance['uuid']}", "ACTIVE",
                                     "ACTIVE")
        prepare(world, instance)
        rows, steps = failover_rounds(world, instance)
        note(f"\n(b) failover of a 3-node instance (1 sync replica) while a writer commits "
             f"through the endpoint; detection after {FAILOVER_SECONDS} s without a "
             f"heartbeat (sqldb_failover_seconds), or 3 s when the replicas lost the "
             f"primary too")
        table(["round", "to promotion s", "to first commit on new s", "commits acknowledged",
               "acknowledged rows lost", "failed attempts", "old primary rejoined s",
               "failovers"],
              [[i + 1, f"{p:.2f}", f"{c:.2f}", a, lost, fails, f"{r:.2f}", e]
               for i, (p, c, a, lost, fails, r, e) in enumerate(rows)])
        commits = [c for _, c, *_ in rows]
        note(f"to first commit on the new primary: {fmt(commits)} s (min / median / max)")
        note("\n(b') the first round, step by step (s from the loss)")
        table(["s", "step"], steps)

        note(f"\n(c) pgbench -S, 4 clients, {PGBENCH_SECONDS} s a run, {PGBENCH_PAIRS} "
             f"alternated pairs: through the endpoint's name (our DNS server) vs straight "
             f"to the primary's address (tps, min / median / max)")
        table(["connections", "through the endpoint", "direct", "ratio"],
              pgbench_pairs(world, instance))
    finally:
        world.stop()
