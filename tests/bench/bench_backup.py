"""Backup and restore of the whole state: time and size by records per kind.

    python -m tests.bench backup
    BENCH_BACKUP_SIZES=1000,10000 BENCH_BACKUP_ROUNDS=5 python -m tests.bench backup

For N records in each of KINDS kinds (records of an ordinary size, a few hundred bytes,
plus a secret-like private file), over ROUNDS rounds (min / median / max):
- backup: `state.backup.create` in a fresh process's view (the kinds loaded from disk,
  as `appliance backup` does), and within it the time every kind's lock is held (what a
  writer may wait);
- the file's size, and the state's size on disk (bases and journals);
- check: `state.backup.read` (decompress, sha256 of every member, parse every kind);
- restore: `state.backup.restore` into a state of the same size (a rollback point copies
  the old files first), then a fresh Store's first count of every kind.
"""

import contextlib
import os
import statistics
import time

from . import note, now, remove, table, temp_dir, title

KINDS = 5
SIZES = tuple(int(s) for s in os.environ.get("BENCH_BACKUP_SIZES", "1000,10000,50000")
              .split(","))
ROUNDS = int(os.environ.get("BENCH_BACKUP_ROUNDS", "5"))


def record(kind, i):
    return {"name": f"{kind}-{i:07d}", "project_id": "00000000-0000-0000-0000-000000000000",
            "description": "a benchmark record of an ordinary size, like most kinds",
            "status": "ACTIVE", "tags": ["bench", f"g{i % 10}"], "size": i % 1000}


def fill(directory, count):
    from state import Store
    store = Store(directory)
    for k in range(KINDS):
        kind = f"bench_kind{k}"
        coll = store.collection(kind)
        for start in range(0, count, 10_000):
            coll.insert_many([record(kind, i) for i in range(start, min(count, start + 10_000))])
    store.write_private("bench.key", os.urandom(64))
    store.close()


def disk_bytes(directory):
    return sum(e.stat().st_size for e in os.scandir(directory) if e.is_file())


def spread(values, unit=1000, fmt="{:.0f}"):
    return " / ".join(fmt.format(v * unit) for v in (min(values), statistics.median(values),
                                                     max(values)))


def one_size(count):
    from state import Store, backup
    from state import store as store_module

    source, target = temp_dir("backup-src"), temp_dir("backup-dst")
    folder = temp_dir("backup-files")
    held = []
    original = store_module.Store.all_locked

    @contextlib.contextmanager
    def timed_locks(self, changed=True):
        with original(self, changed):
            t0 = now()
            yield
        held.append(now() - t0)

    try:
        fill(source, count)
        fill(target, count)
        state_size = disk_bytes(source)
        backups, checks, restores, loads, sizes = [], [], [], [], []
        store_module.Store.all_locked = timed_locks
        for r in range(ROUNDS):
            path = os.path.join(folder, f"b{r}.tar.gz")
            t0 = now()
            backup.create(source, path, {"appliance_version": "bench"})
            backups.append(now() - t0)
            sizes.append(os.path.getsize(path))
            t0 = now()
            checked = backup.read(path, 10 ** 6)
            checks.append(now() - t0)
            t0 = now()
            backup.restore(target, checked)
            restores.append(now() - t0)
            t0 = now()
            fresh = Store(target)
            assert sum(fresh.collection(k).count() for k in fresh.kinds()) == KINDS * count
            fresh.close()
            loads.append(now() - t0)
            os.remove(path)
        return [f"{count:,}", f"{state_size / 1e6:.1f}", f"{statistics.median(sizes) / 1e6:.2f}",
                spread(backups), spread(held, fmt="{:.1f}"), spread(checks), spread(restores),
                spread(loads)]
    finally:
        store_module.Store.all_locked = original
        for d in (source, target, folder):
            remove(d)


def main():
    title(f"Backup and restore: {KINDS} kinds of N records each, {ROUNDS} rounds, "
          "min / median / max in ms")
    rows = []
    for count in SIZES:
        started = time.perf_counter()
        rows.append(one_size(count))
        note(f"  N={count:,}: {time.perf_counter() - started:.0f} s")
    table(["N per kind", "state MB", "backup MB", "backup ms", "locks held ms",
           "check ms", "restore ms", "first load ms"], rows)


if __name__ == "__main__":
    main()
