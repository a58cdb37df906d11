"""The change feed (state/feed.py): every committed write of every kind, numbered without
gaps across kinds and processes, none for a write that was not committed, kept for a
window that survives a restart."""

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from state import Store
from state.feed import FeedGone, set_origin_source
from tests.conftest import ROOT
from tests.state.test_durability import spawn


def _child(code, *args, stdin=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env,
                            stdin=stdin, stdout=subprocess.PIPE, text=True)


def _check_gap_free(entries):
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))


def test_each_write_is_one_entry_with_its_operation_and_statuses(tmp_path):
    store = Store(tmp_path)
    things = store.collection("things")
    made = things.insert({"name": "a", "status": "NEW", "project_id": "p1"})
    things.update(made["uuid"], {"status": "ERROR", "status_reason": "disk full"})
    things.delete(made["uuid"])
    others = store.collection("others").insert_many([{"name": "x"}, {"name": "y"}])
    entries = store.feed.read(0)
    _check_gap_free(entries)
    assert [(e["kind"], e["op"], e["revision"], e["old_status"], e["status"])
            for e in entries[:3]] == [("things", "create", 1, None, "NEW"),
                                      ("things", "update", 2, "NEW", "ERROR"),
                                      ("things", "delete", 2, "ERROR", None)]
    assert entries[1]["status_reason"] == "disk full"
    assert {e["uuid"] for e in entries[:3]} == {made["uuid"]}
    assert entries[0]["name"] == "a" and entries[0]["project_id"] == "p1"
    # one batch, one journal line, consecutive numbers
    assert [e["uuid"] for e in entries[3:]] == sorted(r["uuid"] for r in others)
    assert store.feed.last() == 5
    assert [e["seq"] for e in store.feed.read(3)] == [4, 5]
    assert store.feed.read(5) == []
    # a write that changes nothing is no entry
    store.collection("others").delete_where(lambda r: False)
    assert store.feed.last() == 5


def test_a_cursor_reads_only_what_came_since(tmp_path):
    store = Store(tmp_path)
    things = store.collection("things")
    cursor = store.feed.cursor(0)
    assert cursor.read() == []
    things.insert({"name": "one"})
    assert [e["name"] for e in cursor.read()] == ["one"]
    assert cursor.read() == []
    things.insert({"name": "two"})
    things.insert({"name": "three"})
    assert [e["name"] for e in cursor.read(limit=1)] == ["two"]
    assert [e["name"] for e in cursor.read()] == ["three"]


def test_the_origin_of_a_write_is_the_installed_source_or_this_process(tmp_path):
    store = Store(tmp_path)
    things = store.collection("things")
    things.insert({"name": "by-daemon"})
    actor = {"type": "user", "id": "u1", "name": "alice", "project_id": "p1"}
    # the API's own source (appliance/api/request_context.py) may be installed already, by
    # an earlier test of the run: it is put back, or later tests' writes lose their actor
    installed = set_origin_source(lambda: ("req-1", actor, {"name": "install", "uuid": "x"}))
    try:
        things.insert({"name": "by-request"})
    finally:
        set_origin_source(installed)
    first, second = store.feed.read(0)
    assert first["actor"]["type"] == "platform" and first["request_id"] is None
    assert second["actor"] == actor and second["request_id"] == "req-1"
    assert second["action"] == {"name": "install", "uuid": "x"}


_WRITE_KIND = """
import sys
from state import Store
kind, count = sys.argv[2], int(sys.argv[3])
coll = Store(sys.argv[1]).collection(kind)
for i in range(count):
    print(coll.insert({"name": f"{kind}-{i}"})["uuid"], flush=True)
"""


@pytest.mark.timeout(180)
def test_four_processes_on_two_kinds_number_every_write_once(tmp_path):
    children = [_child(_WRITE_KIND, tmp_path, kind, 150)
                for kind in ("alpha", "beta", "alpha", "beta")]
    acknowledged = set()
    for c in children:
        out, _ = c.communicate(timeout=120)
        assert c.returncode == 0
        acknowledged.update(out.split())
    assert len(acknowledged) == 600
    entries = Store(tmp_path).feed.read(0)
    _check_gap_free(entries)
    assert sorted(e["uuid"] for e in entries) == sorted(acknowledged)
    # the feed's order is each kind's journal order
    for kind in ("alpha", "beta"):
        journal = [r["uuid"] for r in Store(tmp_path).collection(kind).records()]
        assert [e["uuid"] for e in entries if e["kind"] == kind] == journal


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode,compact_min", [("insert", None), ("insert", 4096),
                                              ("batch", 16384)])
def test_sigkill_at_random_moments_leaves_one_entry_per_committed_write(tmp_path, mode,
                                                                         compact_min):
    rng = random.Random(20261126)
    extra = [compact_min] if compact_min else []
    for _ in range(10):
        child = spawn(tmp_path, mode, 100000, *extra)
        child.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.2))
        child.send_signal(signal.SIGKILL)
        child.communicate()
        # the next writer resolves whatever the killed one left
        store = Store(tmp_path)
        store.collection("things").insert({"name": "after-kill"})
        entries = store.feed.read(0)
        _check_gap_free(entries)
        stored = {r["uuid"] for r in store.collection("things").records()}
        created = [e["uuid"] for e in entries if e["op"] == "create"]
        assert len(created) == len(set(created)), "a write numbered twice"
        assert set(created) == stored, "an entry missing, or one for an uncommitted write"
        store.close()


_DIE_INSIDE = """
import os, sys
from state import Store
from state.feed import Feed
where = sys.argv[2]
store = Store(sys.argv[1])
things = store.collection("things")
things.records()
if where == "after-commit":
    # the journal line is durable, the feed's own append never happens
    Feed.append = lambda self, entries: os._exit(9)
else:
    # the pending record is written, the journal line never is
    real = Feed.mark_pending
    def mark_then_die(self, *args):
        real(self, *args)
        os._exit(9)
    Feed.mark_pending = mark_then_die
things.insert({"name": "dying"})
"""


@pytest.mark.parametrize("where,committed", [("after-commit", True),
                                             ("before-journal", False)])
def test_a_writer_killed_inside_the_feed_section(tmp_path, where, committed):
    store = Store(tmp_path)
    store.collection("things").insert({"name": "first"})
    child = _child(_DIE_INSIDE, tmp_path, where)
    child.communicate(timeout=60)
    assert child.returncode == 9
    names = {r["name"] for r in Store(tmp_path).collection("things").records()}
    assert ("dying" in names) is committed
    store.collection("things").insert({"name": "next"})
    entries = store.feed.read(0)
    _check_gap_free(entries)
    expected = ["first", "dying", "next"] if committed else ["first", "next"]
    assert [e["name"] for e in entries] == expected


def test_the_window_survives_a_restart_and_tells_a_late_reader(tmp_path):
    store = Store(tmp_path)
    store.configure_feed(keep_entries=16)
    things = store.collection("things")
    for i in range(100):
        things.insert({"name": f"n{i}"})
    store.close()
    again = Store(tmp_path)
    feed = again.feed
    assert feed.last() == 100
    oldest = feed.oldest()
    assert 1 < oldest <= 100 - 16 + 1, "the window keeps at least keep_entries"
    assert [e["seq"] for e in feed.read(oldest - 1)] == list(range(oldest, 101))
    with pytest.raises(FeedGone) as gone:
        feed.read(oldest - 2)
    assert gone.value.last == 100
    with pytest.raises(FeedGone):
        feed.read(101)          # a revision the feed never had (another state's)


def test_a_window_by_age(tmp_path):
    store = Store(tmp_path)
    store.configure_feed(keep_entries=8, keep_seconds=0.0)
    things = store.collection("things")
    for i in range(40):
        things.insert({"name": f"n{i}"})
    # every full segment is older than zero seconds: only the newest ones stay
    assert store.feed.oldest() > 30


def test_reset_after_a_restore_sends_every_reader_to_resync(tmp_path):
    store = Store(tmp_path)
    things = store.collection("things")
    for i in range(3):
        things.insert({"name": f"n{i}"})
    store.feed.reset()
    with pytest.raises(FeedGone):
        store.feed.read(1)
    assert store.feed.read(3) == []
    things.insert({"name": "after"})
    assert [e["seq"] for e in store.feed.read(3)] == [4]


def test_since_a_time(tmp_path):
    store = Store(tmp_path)
    things = store.collection("things")
    things.insert({"name": "old"})
    middle = store.feed.read(0)[0]["at"]
    time.sleep(0.01)
    things.insert({"name": "new"})
    at_new = store.feed.read(1)[0]["at"]
    assert store.feed.after_time(at_new) == 1
    assert store.feed.after_time(middle) == 0
    assert store.feed.after_time("9999-01-01T00:00:00.000000Z") == 2


def test_a_rolled_back_change_sends_every_reader_to_resync(tmp_path):
    store = Store(tmp_path)
    things = store.collection("things")
    things.insert({"name": "kept"})
    with pytest.raises(RuntimeError):
        with store.all_locked(), store.rollback_point():
            things.insert({"name": "undone"})
            raise RuntimeError("a migration failed")
    assert [r["name"] for r in things.records()] == ["kept"]
    # the entry of "undone" (2) described a write that is gone: nobody may read it
    with pytest.raises(FeedGone):
        store.feed.read(0)
    assert store.feed.read(2) == []
    things.insert({"name": "next"})
    assert [(e["seq"], e["name"]) for e in store.feed.read(2)] == [(3, "next")]


def test_a_restore_leaves_the_feed_out_and_starts_a_new_window(tmp_path):
    from state import backup
    source, target = tmp_path / "source", tmp_path / "target"
    store = Store(source)
    store.collection("things").insert({"name": "backed-up"})
    backup.create(str(source), str(tmp_path / "b.tar.gz"))
    store.close()
    live = Store(target)
    things = live.collection("things")
    for i in range(5):
        things.insert({"name": f"old-{i}"})
    live.close()
    backup.restore(str(target), backup.read(str(tmp_path / "b.tar.gz"), 10 ** 6))
    after = Store(target)
    assert [r["name"] for r in after.collection("things").records()] == ["backed-up"]
    with pytest.raises(FeedGone):
        after.feed.read(2)          # a reader from before the restore resyncs
    assert after.feed.read(5) == []
    after.collection("things").insert({"name": "new"})
    assert [(e["seq"], e["name"]) for e in after.feed.read(5)] == [(6, "new")]


def test_after_a_power_loss_the_journals_give_back_the_lost_entries(tmp_path):
    """The segment and the counter are not fsynced on every write: a power loss can take
    their newest entries while the journal lines (fdatasynced) stay. The first write after
    the reboot makes them again from the journals."""
    import struct
    store = Store(tmp_path)
    for kind in ("things", "others", "things", "others", "things"):
        store.collection(kind).insert({"name": f"{kind}-{store.feed.last() + 1}"})
    names = [e["name"] for e in store.feed.read(0)]
    store.close()
    # what the disk holds after the power loss: the first two entries only
    feed_dir = tmp_path / ".feed"
    head = struct.Struct("<QQQ")
    last, first, size = head.unpack_from((feed_dir / "feed.lock").read_bytes())
    assert last == 5
    segment = feed_dir / f"{first:020d}.log"
    kept = b"".join(segment.read_bytes().splitlines(keepends=True)[:2])
    segment.write_bytes(kept + b'{"torn')
    with open(feed_dir / "feed.lock", "r+b") as f:
        f.write(head.pack(2, first, len(kept)))
    (feed_dir / "boot").write_text("the boot before\n")
    after = Store(tmp_path)
    after.collection("things").insert({"name": "after-reboot"})
    entries = after.feed.read(0)
    _check_gap_free(entries)
    assert [e["name"] for e in entries] == names + ["after-reboot"]


def test_the_feeds_files_are_private(tmp_path):
    store = Store(tmp_path)
    store.collection("things").insert({"name": "secret-holder"})
    feed_dir = tmp_path / ".feed"
    assert feed_dir.stat().st_mode & 0o777 == 0o700
    for path in feed_dir.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600, path


def test_a_cursor_follows_across_segments_while_another_process_writes(tmp_path):
    store = Store(tmp_path)
    store.configure_feed(keep_entries=100)      # segments of 12 entries
    cursor = store.feed.cursor(0)
    child = _child(_WRITE_KIND, tmp_path, "gamma", 400)
    # this process writes too, starting segments of its window's size meanwhile
    writer = threading.Thread(target=lambda: [store.collection("delta").insert({"n": i})
                                              for i in range(200)])
    writer.start()
    seen = []
    while child.poll() is None or writer.is_alive() or len(seen) < store.feed.last():
        seen.extend(e["seq"] for e in cursor.read())
    child.communicate(timeout=60)
    writer.join()
    assert child.returncode == 0
    assert seen == list(range(1, 601))
    assert len(store.feed.segments()) > 1
