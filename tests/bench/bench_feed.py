"""What the change feed (state/feed.py) costs a write.

    python -m tests.bench feed

(a) single `insert()` calls, side by side in one process: a kind opened through `Store`
    (its writes numbered in the feed) and a kind opened as a bare `Collection` (no feed),
    in two state directories on the same disk, alternating write by write. Per pair, the
    ratio feed / no feed; min / median / max of the ratios and of each side's times.
(b) two processes inserting into two different kinds at once, with and without the feed:
    the journals' fdatasyncs run outside the feed's lock, in parallel, but each write
    takes the feed's lock twice and may wait for the other's publication (docs/events.md);
    total writes per second, the sides alternating round by round.
(c) (b) on a slow disk: each fdatasync of the two processes made SLOW_MS longer (a sleep
    after the real one, in the children only), as when other suites load the disk and
    an fdatasync takes milliseconds: what holding a lock across the fdatasync would cost
    shows there, not on a quiet disk where the fdatasync is ~0.2 ms.
Figures are printed, never asserted.
"""

import os
import statistics
import subprocess
import sys

from . import ROOT, note, now, remove, table, temp_dir, title

WRITES = 400
PARALLEL_WRITES = 300
ROUNDS = 3
SLOW_MS = 2.0

_PARALLEL = """
import os, sys, time
from state import Collection, Store
directory, kind, count, feed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
slow = float(sys.argv[5]) / 1000
if slow:
    real = os.fdatasync
    def fdatasync_on_a_slow_disk(fd):
        real(fd)
        time.sleep(slow)
    os.fdatasync = fdatasync_on_a_slow_disk
coll = (Store(directory).collection(kind) if feed == "feed" else
        Collection(directory, kind))
print("ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
for i in range(count):
    coll.insert({"name": f"n{i}", "description": "a record of an ordinary size"})
print(time.perf_counter() - t0, flush=True)
"""


def tri(values, scale=1000.0, fmt="{:.3f}"):
    return [fmt.format(min(values) * scale), fmt.format(statistics.median(values) * scale),
            fmt.format(max(values) * scale)]


def measure_pairs():
    from state import Collection, Store
    with_dir, without_dir = temp_dir("feed-on"), temp_dir("feed-off")
    try:
        with_feed = Store(with_dir).collection("bench_items")
        os.makedirs(os.path.join(without_dir, ".locks"), exist_ok=True)
        without = Collection(without_dir, "bench_items")
        record = {"name": "x", "status": "NEW", "project_id": "p",
                  "description": "a record of an ordinary size"}
        for coll in (with_feed, without):       # journals created, files warm
            coll.insert(dict(record))
        on, off = [], []
        for i in range(WRITES):
            pair = [(with_feed, on), (without, off)]
            if i % 2:
                pair.reverse()
            for coll, times in pair:
                t0 = now()
                coll.insert(dict(record, name=f"n{i}"))
                times.append(now() - t0)
        return on, off
    finally:
        remove(with_dir)
        remove(without_dir)


def measure_parallel(feed, slow_ms=0.0):
    directory = temp_dir("feed-parallel")
    os.makedirs(os.path.join(directory, ".locks"), exist_ok=True)
    try:
        env = dict(os.environ, PYTHONPATH=ROOT)
        children = [subprocess.Popen([sys.executable, "-c", _PARALLEL, directory, kind,
                                      str(PARALLEL_WRITES), feed, str(slow_ms)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
                    for kind in ("alpha", "beta")]
        for c in children:
            c.stdout.readline()
        t0 = now()
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        for c in children:
            c.communicate(timeout=300)
        return 2 * PARALLEL_WRITES / (now() - t0)
    finally:
        remove(directory)


def main():
    title("Change feed: the cost of numbering every write")
    on, off = measure_pairs()
    ratios = [a / b for a, b in zip(on, off)]
    table(["single insert", "min", "median", "max"],
          [["with the feed (ms)", *tri(on)], ["without (ms)", *tri(off)],
           ["ratio with / without", *tri(ratios, 1.0, "{:.2f}")]])
    note(f"({WRITES} writes each side, alternating; the fdatasync is most of both)")
    for slow_ms, label in ((0.0, "2 processes, 2 kinds"),
                           (SLOW_MS, f"same, fdatasync +{SLOW_MS:g} ms")):
        rows = {"feed": [], "none": []}
        for _ in range(ROUNDS):
            for side in ("none", "feed"):
                rows[side].append(measure_parallel(side, slow_ms))
        table([label, "min writes/s", "median", "max"],
              [["with the feed", *[f"{v:.0f}" for v in (min(rows["feed"]),
                                                         statistics.median(rows["feed"]),
                                                         max(rows["feed"]))]],
               ["without", *[f"{v:.0f}" for v in (min(rows["none"]),
                                                  statistics.median(rows["none"]),
                                                  max(rows["none"]))]]])


if __name__ == "__main__":
    main()
