"""The journal: torn and damaged lines, compaction, large kinds, and other processes
reading only the journal's tail."""

import os
import statistics
import subprocess
import time

import orjson
import pytest
from tinydb import TinyDB

from state import Store, StoreError
from state.collection import Collection

from .test_durability import spawn


def journal_lines(coll):
    with open(coll.journal.path, "rb") as f:
        return f.read().split(b"\n")


def fresh(directory, unique=()):
    """The kind as a process that never read it sees it."""
    return Store(directory).collection("things", unique=unique)


def test_torn_last_line_is_ignored_then_cut_by_the_next_writer(tmp_path):
    things = Store(tmp_path).collection("things")
    kept = things.insert({"name": "kept"})
    reader = fresh(tmp_path)
    assert reader.count() == 1
    # a writer killed in the middle of its line: never acknowledged
    with open(things.journal.path, "ab") as f:
        f.write(b'{"put":[{"uuid":"torn","created_at":"2026-')
    for view in (reader, fresh(tmp_path), things):
        assert [r["uuid"] for r in view.records()] == [kept["uuid"]]
    after = fresh(tmp_path)
    added = after.insert({"name": "after"})
    lines = journal_lines(things)
    assert lines[-1] == b"" and b"torn" not in b"\n".join(lines)
    assert [orjson.loads(line) for line in lines[1:-1]][-1]["put"][0]["uuid"] == added["uuid"]
    for view in (reader, fresh(tmp_path), things):
        assert [r["uuid"] for r in view.records()] == [kept["uuid"], added["uuid"]]


def test_complete_but_unparsable_last_line_counts_as_torn(tmp_path):
    things = Store(tmp_path).collection("things")
    kept = things.insert({})
    with open(things.journal.path, "ab") as f:
        f.write(b'{"put":[{"uu\x00\x00\x00\n')      # power lost before the page was written
    assert [r["uuid"] for r in fresh(tmp_path).records()] == [kept["uuid"]]
    fresh(tmp_path).insert({})
    assert fresh(tmp_path).count() == 2


def test_damage_before_the_last_line_is_an_error_not_a_silent_cut(tmp_path):
    things = Store(tmp_path).collection("things")
    things.insert({})
    with open(things.journal.path, "ab") as f:
        f.write(b"garbage\n" + orjson.dumps({"del": ["x"]}) + b"\n")
    with pytest.raises(StoreError, match="damaged line"):
        fresh(tmp_path).records()


def test_compaction_keeps_everything_and_readers_follow_without_the_base(tmp_path):
    things = Store(tmp_path).collection("things", unique=[("name",)])
    reader = fresh(tmp_path)
    made = [things.insert({"name": f"n{i}"}) for i in range(20)]
    things.update(made[3]["uuid"], {"name": "renamed"})
    things.delete(made[4]["uuid"])
    assert reader.count() == 19 and reader.full_loads == 1
    base_before = os.stat(things.path).st_ino
    things.compact()
    assert os.stat(things.path).st_ino != base_before
    # the new journal is empty and the base alone is the whole kind, for stock TinyDB too
    assert journal_lines(things)[1:] == [b""]
    in_base = {r["uuid"]: r for r in TinyDB(things.path).table("things").all()}
    assert in_base == {r["uuid"]: r for r in things.records()}
    # a reader that kept up finishes the old journal and carries on: no full load
    things.insert({"name": "after"})
    assert reader.count() == 20 and reader.full_loads == 1
    assert reader.require(made[3]["uuid"])["name"] == "renamed"
    # one that missed two compactions loads the base again
    things.compact()
    things.insert({"name": "later"})
    things.compact()
    late = fresh(tmp_path, unique=[("name",)])
    late.count()
    loads = late.full_loads
    things.insert({"name": "latest"})
    things.compact()
    things.compact()
    assert late.count() == 22 and late.full_loads == loads + 1
    assert [r["uuid"] for r in late.records()] == [r["uuid"] for r in things.records()]
    # the unique keys survive compaction on every side
    with pytest.raises(Exception, match="already exists"):
        late.insert({"name": "renamed"})


def test_writes_compact_by_themselves_past_the_size(tmp_path, monkeypatch):
    monkeypatch.setattr(Collection, "COMPACT_MIN_BYTES", 2048)
    things = Store(tmp_path).collection("things")
    reader = fresh(tmp_path)
    for i in range(100):
        things.insert({"name": f"n{i}", "payload": "x" * 64})
        assert reader.count() == i + 1
    # the journal never outgrows the base (or the minimum) by more than one line
    assert os.path.getsize(things.journal.path) <= max(2048, os.path.getsize(things.path)) + 300
    assert len(TinyDB(things.path).table("things")) > 50
    assert reader.full_loads == 1
    assert [r["uuid"] for r in fresh(tmp_path).records()] == [r["uuid"] for r in things.records()]


def test_crash_between_the_two_renames_of_a_compaction(tmp_path):
    """The base was replaced, the new journal was not: the old journal's lines are all in
    the base already, and replaying whole records onto it changes nothing."""
    things = Store(tmp_path).collection("things", unique=[("name",)])
    a, b, c = (things.insert({"name": n}) for n in "abc")
    things.update(a["uuid"], {"name": "a2"})
    things.delete(b["uuid"])
    things.insert({"uuid": b["uuid"], "name": "b again"})
    # what _compact does before it dies
    records = things.records()
    things.storage.write({"things": {str(i): r for i, r in enumerate(records, 1)}})
    expected = [(r["uuid"], r["name"], r["revision"]) for r in records]
    view = fresh(tmp_path, unique=[("name",)])
    assert [(r["uuid"], r["name"], r["revision"]) for r in view.records()] == expected
    # writes go on in the old journal, and the next compaction starts a new one
    d = view.insert({"name": "d"})
    with pytest.raises(Exception, match="already exists"):
        view.insert({"name": "a2"})
    view.compact()
    assert [r["uuid"] for r in fresh(tmp_path).records()] == [u for u, _, _ in expected] + [
        d["uuid"]]
    assert things.count() == 4


@pytest.mark.timeout(300)
def test_a_kind_of_100000_records_writes_and_reloads(tmp_path):
    things = Store(tmp_path).collection("things", unique=[("name",)])
    things.insert_many([{"name": f"item-{i:06d}", "group": f"g{i % 10}"}
                        for i in range(100_000)])
    reader = fresh(tmp_path)
    assert reader.count() == 100_000
    assert len(reader.by("group", "g3")) == 10_000
    times = []
    for i in range(30):
        t0 = time.perf_counter()
        made = things.insert({"name": f"single-{i}", "group": "g3"})
        times.append(time.perf_counter() - t0)
    target = things.by("group", "g4")[5_000]
    things.update(target["uuid"], {"group": "g3"}, expect_revision=1)
    things.delete(things.by("group", "g5")[0]["uuid"])
    with pytest.raises(Exception, match="already exists"):
        things.insert({"name": "item-000007"})
    # the bound is 2 ms; 20 ms only catches a write that went back to O(n)
    # (rewriting 100,000 records took ~300 ms) on a loaded 2-core machine
    assert statistics.median(times) < 0.020, times
    # a reader that kept its state applies only the tail, indexes included
    assert reader.count() == 100_029 and reader.full_loads == 1
    g3 = reader.by("group", "g3")
    assert len(g3) == 10_031 and g3[-1]["uuid"] == made["uuid"]
    assert target["uuid"] in {r["uuid"] for r in g3}
    assert g3 == sorted(g3, key=lambda r: (r["created_at"], r["uuid"]))
    # and a fresh process reloads the same kind
    reloaded = fresh(tmp_path)
    assert reloaded.records() == things.records()
    assert reloaded.require(target["uuid"])["revision"] == 2


def command(child, line):
    child.stdin.write(line + "\n")
    child.stdin.flush()
    return child.stdout.readline().strip()


@pytest.mark.timeout(120)
def test_another_process_write_is_read_from_the_tail_only(tmp_path):
    things = Store(tmp_path).collection("things")
    things.insert_many([{"name": f"n{i}", "payload": "x" * 64} for i in range(10_000)])
    things.compact()
    reader = fresh(tmp_path)
    assert reader.count() == 10_000 and reader.full_loads == 1
    base_size = os.path.getsize(things.path)
    child = spawn(tmp_path, "serve", 0, stdin=subprocess.PIPE)
    try:
        for _ in range(20):
            # visible as soon as the other process acknowledged it: no wait, no event
            uuid = command(child, "insert")
            assert reader.require(uuid)["name"] == "served"
        first = reader.records()[0]["uuid"]
        assert command(child, "update " + first) == first
        assert reader.require(first)["name"] == "updated"
        assert command(child, "delete " + first) == first
        assert reader.get(first) is None and reader.count() == 10_019
        assert command(child, "compact") == "ok"
        assert command(child, "insert")
        assert reader.count() == 10_020
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert reader.full_loads == 1
    # 23 lines of a few hundred bytes each, against a base of megabytes
    assert reader.tail_bytes < 23 * 400 < base_size / 100
