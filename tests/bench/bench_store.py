"""The file store: single writes by kind size, 10,000 single inserts, the first filtered
list after another process wrote, and a fresh process's first load.

    python -m tests.bench store
    BENCH_STORE_BEFORE=main python -m tests.bench store     # and the store of `main`
    BENCH_STORE_BEFORE=/path/with/state python -m tests.bench store

Every measurement runs in a fresh child process (`--measure`) so that the store under test
is the only one loaded. With BENCH_STORE_BEFORE (a git ref of this repository, or a
directory holding a `state/` package) the same measurements also run on that store, the
two sides alternating, measurement by measurement, in one run. Everything above `state/`
(the API's listing code) comes from this tree on both sides.

(a) one `insert()` into a kind of 100 / 10,000 / 100,000 records (filled by insert_many):
    min / median / max over up to 200 writes (fewer when a side is slow: a time budget),
    beside a bare append + fdatasync made right after each (the disk's share).
(b) 10,000 single `insert()` calls into an empty kind; a side that passes the budget
    (BENCH_INSERT_BUDGET seconds, default 60) stops and is extrapolated from a linear fit.
(c) another process inserts one record, then this one runs the API's filtered list
    (`Resource.list_handler`, ?group=g3, ~1,000 hits out of 10,000): p50 / p99 / max over
    200 rounds. Goal p99 < 50 ms. The same list with no write before it shows what the
    list itself costs (filter and render), apart from catching up with the write.
(d) a fresh process's first `records()` of 10,000 and 100,000 records.
(e) another process's insert seen by this process's ChangeWatch: time from the command
    to the write's acknowledgement, and to the watch callback.
(f) the system calls of one `insert()` into a kind of 100 / 100,000 records: `strace -c
    -f` attached to the measuring process around SYSCALL_WRITES inserts, minus an empty
    attachment (strace's own attach and detach), divided by the inserts. strace slows
    each call down; it counts them, this bench times nothing under it. Installed from
    Debian when missing and root (`apt-get install strace`); skipped otherwise.
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid as uuidlib

from . import ROOT, note, now, remove, table, temp_dir, title

N = 10_000
KIND = "bench_items"
UNIQUE = [("name",)]
PROJECTS = [str(uuidlib.UUID(int=i + 1)) for i in range(10)]
GOAL_LIST_MS = 50
SIZES = (100, 10_000, 100_000)
SYSCALL_SIZES = (100, 100_000)
SYSCALL_WRITES = 200


def record(i):
    return {"name": f"item-{i:06d}", "group": f"g{i % 10}", "size": i % 100,
            "project_id": PROJECTS[i % len(PROJECTS)],
            "description": "a benchmark record of an ordinary size, like most kinds"}


def fill(directory, count):
    from state import Store
    coll = Store(directory).collection(KIND, unique=UNIQUE)
    for start in range(0, count, N):
        coll.insert_many([record(i) for i in range(start, min(count, start + N))])
    return coll


# ---- measurements (child side) ----------------------------------------------------------

def measure_single(size, budget=20.0, writes=200):
    """Each insert is followed by a bare append + fdatasync of a line of the same size to
    a scratch file beside it: this disk's fsync latency swings tenfold with the machine's
    load, and the pair shows what the store adds to it at that moment."""
    directory = temp_dir("store-single")
    scratch = os.open(os.path.join(directory, "scratch"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        coll = fill(directory, size)
        times, bare = [], []
        line = b"x" * 300 + b"\n"
        started = now()
        for i in range(writes):
            t0 = now()
            coll.insert(record(size + i))
            times.append(now() - t0)
            t0 = now()
            os.write(scratch, line)
            os.fdatasync(scratch)
            bare.append(now() - t0)
            if now() - started > budget and len(times) >= 5:
                break
        return {"times": times, "bare": bare}
    finally:
        os.close(scratch)
        remove(directory)


def measure_inserts(budget):
    directory = temp_dir("store-insert")
    try:
        from state import Store
        coll = Store(directory).collection(KIND, unique=UNIQUE)
        window, fit = 100, []
        started = window_start = now()
        done = 0
        for i in range(N):
            coll.insert(record(i))
            done = i + 1
            if done % window == 0:
                t = now()
                fit.append((done - window / 2, (t - window_start) / window))
                window_start = t
                if t - started > budget and done < N:
                    break
        total = now() - started
    finally:
        remove(directory)
    if done == N:
        return {"done": done, "total": total, "extrapolated": False}
    # ms/insert grows about linearly with the file: t(n) = a + b n
    mx = statistics.fmean(x for x, _ in fit)
    my = statistics.fmean(y for _, y in fit)
    b = sum((x - mx) * (y - my) for x, y in fit) / sum((x - mx) ** 2 for x, _ in fit)
    a = my - b * mx
    return {"done": done, "total": N * a + b * N * (N - 1) / 2, "extrapolated": True}


def list_call(query):
    import bottle
    q = bottle.FormsDict()
    for k, v in query.items():
        q[k] = v
    return types.SimpleNamespace(query=q, principal=None, params={})


def items_resource(store):
    from appliance.api.fields import Field, Integer, Reference, String, Text
    from appliance.api.resource import Resource
    items = Resource(
        name="BenchItem", path="/v1/bench/items", kind=KIND, service="bench",
        policy="item", unique=UNIQUE, project_scoped=True,
        fields=[Field("name", String(64), required=True),
                Field("group", String(16)), Field("size", Integer()),
                Field("project_id", Reference("/v1/iam/projects"), required=True),
                Field("description", Text(4096))])
    items.api = types.SimpleNamespace(store=store)
    return items


def measure_cold(rounds=200):
    import bottle
    from state import Store
    directory = temp_dir("store-cold")
    writer = None
    try:
        fill(directory, N)
        store = Store(directory)
        items = items_resource(store)
        bottle.response.bind()          # list_handler sets paging headers on it
        hits = len(items.list_handler(list_call({"group": "g3"})))     # warm: loaded
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.bench_store", "--writer", directory],
            cwd=os.getcwd(), env=os.environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        warm = []
        for _ in range(rounds):
            t0 = now()
            items.list_handler(list_call({"group": "g3"}))
            warm.append(now() - t0)
        cold = []
        for i in range(rounds):
            writer.stdin.write(f"{N + i}\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "ok"
            t0 = now()
            result = items.list_handler(list_call({"group": "g3"}))
            cold.append(now() - t0)
        assert len(result) >= hits
        return {"times": cold, "warm": warm, "hits": len(result)}
    finally:
        if writer is not None:
            writer.stdin.close()
            writer.wait()
        remove(directory)


def measure_watch(rounds=200):
    """Another process inserts; seconds from the command to its acknowledgement and to
    this process's ChangeWatch callback."""
    import threading
    from state import ChangeWatch, Store
    directory = temp_dir("store-watch")
    fill(directory, N)
    seen = threading.Event()
    watch = ChangeWatch(Store(directory)).start()
    watch.subscribe(KIND, lambda kind: seen.set())
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.bench_store", "--writer", directory],
        cwd=os.getcwd(), env=os.environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    acks, events = [], []
    try:
        writer.stdin.write(f"{N + rounds}\n")     # the child's start-up and first load
        writer.stdin.flush()
        writer.stdout.readline()
        for i in range(rounds):
            time.sleep(0.01)
            seen.clear()
            t0 = now()
            writer.stdin.write(f"{N + i}\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "ok"
            acks.append(now() - t0)
            if seen.wait(5):
                events.append(now() - t0)
        return {"acks": acks, "events": events}
    finally:
        writer.stdin.close()
        writer.wait()
        watch.stop()
        remove(directory)


def serve_writes(directory):
    """Another process: insert record(i) for each i read from stdin, say ok after it."""
    from state import Store
    coll = Store(directory).collection(KIND, unique=UNIQUE)
    for line in sys.stdin:
        coll.insert(record(int(line)))
        print("ok", flush=True)


def measure_reload(size):
    directory = temp_dir("store-reload")
    try:
        fill(directory, size)
        from state import Store
        times = []
        for _ in range(5):
            t0 = now()
            Store(directory).collection(KIND).records()
            times.append(now() - t0)
        return {"times": times}
    finally:
        remove(directory)


def strace_path():
    """strace, installed from Debian when missing and we are root; None if unavailable."""
    path = shutil.which("strace")
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
                 "env": dict(os.environ, DEBIAN_FRONTEND="noninteractive")}
        cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "strace"]
        if subprocess.call(cmd, **quiet) != 0:
            subprocess.call(["apt-get", "update", "-qq"], **quiet)
            subprocess.call(cmd, **quiet)
        path = shutil.which("strace")
    return path


def traced(fn):
    """{syscall: calls} made by this process (every thread) while fn() runs: strace -c -f
    attached to it, then detached by SIGINT, which makes it write its summary."""
    out = tempfile.NamedTemporaryFile(prefix="bench-strace-", delete=False)
    out.close()
    tracer = subprocess.Popen([strace_path(), "-c", "-f", "-o", out.name,
                               "-p", str(os.getpid())],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = now() + 30
        while tracer_pid() != tracer.pid:
            if tracer.poll() is not None or now() > deadline:
                raise RuntimeError("strace did not attach")
            time.sleep(0.01)
        fn()
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(30)
    with open(out.name) as f:
        text = f.read()
    os.unlink(out.name)
    calls = {}
    # "% time  seconds  usecs/call  calls  errors  syscall": errors may be blank
    for m in re.finditer(r"^\s*[0-9.]+\s+[0-9.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?([a-z_0-9]+)\s*$",
                         text, re.M):
        if m.group(2) != "total":
            calls[m.group(2)] = int(m.group(1))
    return calls


def tracer_pid():
    with open("/proc/self/status") as f:
        return int(re.search(r"^TracerPid:\s+(\d+)", f.read(), re.M).group(1))


def measure_syscalls(size, writes=SYSCALL_WRITES):
    """Calls per insert() of each system call, the empty attachment's calls subtracted."""
    directory = temp_dir("store-syscalls")
    try:
        coll = fill(directory, size)
        coll.insert(record(size))           # the kind's files are open, as in a server
        empty = traced(lambda: None)

        def inserts():
            for i in range(writes):
                coll.insert(record(size + 1 + i))
        loaded = traced(inserts)
        return {"per_insert": {name: (count - empty.get(name, 0)) / writes
                               for name, count in loaded.items()}, "writes": writes}
    finally:
        remove(directory)


MEASURES = {"single": measure_single, "inserts": measure_inserts, "cold": measure_cold,
            "reload": measure_reload, "watch": measure_watch, "syscalls": measure_syscalls}


# ---- the two sides (parent side) --------------------------------------------------------

def before_tree(spec):
    """A directory holding the `state/` package of BENCH_STORE_BEFORE, and a label."""
    if os.path.isdir(os.path.join(spec, "state")):
        return spec, spec
    directory = tempfile.mkdtemp(prefix="bench-store-before-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", spec, "state"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", spec], check=True,
                            capture_output=True, text=True).stdout.strip()
    return directory, f"{spec} ({commit})"


def run(side, name, *args):
    """One measurement in a child whose `import state` finds the side's store: its cwd
    comes first on sys.path, and the rest of the code comes from ROOT."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "tests.bench.bench_store", "--measure",
                          name, json.dumps(args)],
                         cwd=side, env=env, check=True, capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    expected = os.path.join(os.path.realpath(side), "state")
    assert os.path.dirname(os.path.realpath(result["state"])) == expected, result["state"]
    return result


_turn = [0]


def alternate(sides, name, *args):
    """{label: result}: the sides one after the other, which one goes first alternating
    from one measurement to the next. Dirty pages of the previous run are flushed first,
    so that one side's writeback does not land in the other side's fsyncs."""
    _turn[0] += 1
    order = sides if _turn[0] % 2 else sides[::-1]
    results = {}
    for label, path in order:
        os.sync()
        time.sleep(1)
        results[label] = run(path, name, *args)
    return {label: results[label] for label, _ in sides}


def tri(times):
    return [f"{min(times) * 1000:.2f}", f"{statistics.median(times) * 1000:.2f}",
            f"{max(times) * 1000:.2f}"]


def p(times, q):
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main():
    title("bench_store: base + journal per kind")
    sides = []
    before = os.environ.get("BENCH_STORE_BEFORE")
    made = None
    if before:
        made, label = before_tree(before)
        sides.append((f"before: {label}", made))
    sides.append(("after: this tree", ROOT))
    budget = float(os.environ.get("BENCH_INSERT_BUDGET", "60"))
    try:
        rows = []
        for size in SIZES:
            for label, result in alternate(sides, "single", size).items():
                rows.append([f"{size:,}", label, len(result["times"]), *tri(result["times"]),
                             *tri(result["bare"])])
        note("(a) one insert() into a kind of N records (lock, catch up, write, fsync), and "
             "right after each, a bare append + fdatasync of a line to another file")
        table(["records", "side", "writes", "min ms", "median ms", "max ms",
               "bare min", "bare median", "bare max"], rows)

        rows = []
        for label, result in alternate(sides, "inserts", budget).items():
            total = f"{result['total']:.1f}" + (" (extrapolated)" if result["extrapolated"]
                                                else "")
            rows.append([label, f"{result['done']:,}", total,
                         f"{result['total'] / N * 1000:.2f}"])
        note(f"\n(b) {N:,} single insert() calls into an empty kind (budget {budget:.0f} s)")
        table(["side", "inserts run", "total s", "mean ms/insert"], rows)

        rows = []
        for label, result in alternate(sides, "cold").items():
            for when, t in (("after a write", result["times"]), ("no write (warm)",
                                                                  result["warm"])):
                p99 = p(t, 0.99) * 1000
                rows.append([label, when, len(t), result["hits"], f"{p(t, 0.5) * 1000:.2f}",
                             f"{p99:.2f}", f"{max(t) * 1000:.2f}",
                             ("met" if p99 < GOAL_LIST_MS else "NOT met")
                             if when == "after a write" else ""])
        note(f"\n(c) API list ?group=g3 over {N:,} records, the first after another "
             f"process's insert (goal p99 < {GOAL_LIST_MS} ms), and the same list repeated "
             "with no write between")
        table(["side", "list", "rounds", "hits", "p50 ms", "p99 ms", "max ms", "goal"], rows)

        rows = []
        for size in (N, 10 * N):
            for label, result in alternate(sides, "reload", size).items():
                rows.append([f"{size:,}", label, *tri(result["times"])])
        note("\n(d) a fresh process's first records() (5 loads)")
        table(["records", "side", "min ms", "median ms", "max ms"], rows)

        rows = []
        for label, result in alternate(sides, "watch").items():
            for what, t in (("write acknowledged", result["acks"]),
                            ("ChangeWatch callback", result["events"])):
                rows.append([label, what, len(t), f"{p(t, 0.5) * 1000:.2f}",
                             f"{p(t, 0.99) * 1000:.2f}", f"{max(t) * 1000:.2f}"])
        note(f"\n(e) another process inserts into a kind of {N:,} records: time from its "
             "command to its acknowledgement and to this process's watch callback "
             "(goal: seen within 10 ms of the write)")
        table(["side", "until", "rounds", "p50 ms", "p99 ms", "max ms"], rows)
        syscall_table(sides)
    finally:
        if made and made != before:
            remove(made)


# the calls that carry a write's cost, shown first and named
WRITES = ("write", "pwrite64", "writev", "pwritev", "pwritev2")
SYNCS = ("fsync", "fdatasync", "sync_file_range")


def syscall_table(sides):
    if not strace_path():
        note("\n(f) skipped: strace is not installed (apt-get install strace)")
        return
    rows = []
    for size in SYSCALL_SIZES:
        for label, result in alternate(sides, "syscalls", size).items():
            per = {k: v for k, v in result["per_insert"].items() if v >= 0.005}
            group = [sum(per.get(k, 0) for k in names) for names in (WRITES, SYNCS)]
            others = sorted((k for k in per if k not in WRITES + SYNCS),
                            key=lambda k: -per[k])
            rows.append([f"{size:,}", label, f"{group[0]:.2f}", f"{group[1]:.2f}",
                         f"{sum(per.values()):.2f}",
                         ", ".join(f"{k} {per[k]:.2f}" for k in others)])
    note(f"\n(f) system calls per insert() ({SYSCALL_WRITES} inserts under strace -c -f; "
         f"writes = {'+'.join(WRITES)}, syncs = {'+'.join(SYNCS)})")
    table(["records", "side", "writes", "syncs", "all", "the others per insert"], rows)


def child(argv):
    if argv[0] == "--writer":
        serve_writes(argv[1])
        return
    import state
    result = MEASURES[argv[1]](*json.loads(argv[2]))
    result["state"] = state.__file__
    print(json.dumps(result))


if __name__ == "__main__":
    child(sys.argv[1:])
