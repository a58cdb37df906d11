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


def test_a_cursor_placed_at_the_end_finds_its_place_from_the_end(tmp_path):
    """A cursor made at the feed's end (a new event stream) places itself by the lines
    after it, read from the segment's end; what it then reads is exactly what came since,
    and a cursor placed in the middle reads on from there."""
    store = Store(tmp_path)
    things = store.collection("things")
    for i in range(300):
        things.insert({"name": f"old-{i}"})
    middle = store.feed.last() - 100
    at_end = store.feed.cursor(store.feed.last())
    in_middle = store.feed.cursor(middle)
    things.insert({"name": "new-0"})
    things.insert({"name": "new-1"})
    got = at_end.read()
    assert [e["name"] for e in got] == ["new-0", "new-1"]
    assert [e["seq"] for e in got] == [store.feed.last() - 1, store.feed.last()]
    assert at_end.read() == []
    rest = in_middle.read()
    assert [e["seq"] for e in rest] == list(range(middle + 1, store.feed.last() + 1))
    assert [e["name"] for e in rest][-2:] == ["new-0", "new-1"]


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


@pytest.mark.timeout(240)
def test_sigkill_at_random_moments_while_another_kind_writes(tmp_path):
    """A writer of another kind runs all along: its tickets queue behind the killed
    writer's, and it resolves the dead slot (so it never hangs), with no entry lost,
    invented or numbered twice."""
    rng = random.Random(20261127)
    store = Store(tmp_path)
    others = store.collection("others")
    acknowledged = []
    stop = threading.Event()

    def write_others():
        while not stop.is_set():
            acknowledged.append(others.insert({"name": "other"})["uuid"])

    writer = threading.Thread(target=write_others)
    writer.start()
    try:
        for _ in range(8):
            child = spawn(tmp_path, "insert", 100000, 4096)
            child.stdout.readline()
            time.sleep(rng.uniform(0.0, 0.2))
            child.send_signal(signal.SIGKILL)
            child.communicate()
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not writer.is_alive(), "the other kind's writer hangs behind a dead ticket"
    store.collection("things").insert({"name": "after-kill"})
    entries = store.feed.read(0)
    _check_gap_free(entries)
    created = [e["uuid"] for e in entries if e["op"] == "create"]
    assert len(created) == len(set(created)), "a write numbered twice"
    stored = {r["uuid"] for r in store.collection("things").records()}
    assert {e["uuid"] for e in entries if e["kind"] == "things"} == stored
    assert [e["uuid"] for e in entries if e["kind"] == "others"] == acknowledged
    assert len(acknowledged) > 0


_DIE_INSIDE = """
import os, sys
import state.collection
from state import Store
from state.feed import Feed
where, alone = sys.argv[2], sys.argv[3] == "alone"
store = Store(sys.argv[1])
things = store.collection("things")
things.records()
if alone:
    # a writer that took the last ticket, with no other inside, keeps the feed lock
    # across its fdatasync: the same points, on that path
    things.insert({"name": "warm"})
if where == "after-commit":
    # the journal line is durable, the feed's own append never happens
    Feed.append = lambda self, *args: os._exit(9)
elif where == "after-ticket":
    # the ticket and the slot are taken, the journal line is never written
    real = Feed._reserve
    def reserve_then_die(self, *args):
        real(self, *args)
        os._exit(9)
    Feed._reserve = reserve_then_die
elif where == "before-fdatasync":
    # the line is complete (readers of the kind see it), its fdatasync never happens
    os.fdatasync = lambda fd: os._exit(9)
else:
    # half of the line, then death: torn, never acknowledged
    def write_half(fd, data, offset):
        os.pwrite(fd, data[:len(data) // 2], offset)
        os._exit(9)
    state.collection._pwrite_all = write_half
things.insert({"name": "dying"})
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("alone", ["alone", "not-alone"])
@pytest.mark.parametrize("next_kind", ["things", "others"])
@pytest.mark.parametrize("where,committed", [("after-commit", True),
                                             ("after-ticket", False),
                                             ("before-fdatasync", True),
                                             ("torn-line", False)])
def test_a_writer_killed_inside_the_feed_section(tmp_path, where, committed, next_kind,
                                                 alone):
    """The next writer, of the same kind or another, gets a later ticket and waits for
    the dead one's: it finds the writer gone and resolves its slot from the line."""
    store = Store(tmp_path)
    store.collection("things").insert({"name": "first"})
    child = _child(_DIE_INSIDE, tmp_path, where, alone)
    child.communicate(timeout=60)
    assert child.returncode == 9
    store.collection(next_kind).insert({"name": "next"})
    entries = store.feed.read(0)
    _check_gap_free(entries)
    expected = ["first"] + (["warm"] if alone == "alone" else [])
    expected += ["dying", "next"] if committed else ["next"]
    assert [e["name"] for e in entries] == expected
    names = {r["name"] for r in Store(tmp_path).collection("things").records()}
    assert ("dying" in names) is committed
    store.collection("things").insert({"name": "last"})
    entries = store.feed.read(0)
    _check_gap_free(entries)
    assert [e["name"] for e in entries] == expected + ["last"]
    assert ([r["name"] for r in store.collection("things").records()] ==
            [n for n in expected + ["last"] if n != "next" or next_kind == "things"])


_HELD_BEFORE_FDATASYNC = """
import os, sys
from state import Store
store = Store(sys.argv[1])
things = store.collection("things")
things.records()
real = os.fdatasync
def fdatasync_when_told(fd):
    print("written", flush=True)
    sys.stdin.readline()
    real(fd)
os.fdatasync = fdatasync_when_told
things.insert({"name": "slow"})
print("returned", flush=True)
"""


@pytest.mark.timeout(60)
def test_a_later_write_waits_for_an_earlier_ticket_still_in_flight(tmp_path):
    """Writes of two kinds fdatasync outside the feed's lock: the later ticket's writer
    is durable first, but neither its entry nor any reader goes past the earlier ticket
    still in flight, and it returns only once both are published, in ticket order."""
    store = Store(tmp_path)
    store.collection("things").insert({"name": "first"})
    child = _child(_HELD_BEFORE_FDATASYNC, tmp_path, stdin=subprocess.PIPE)
    assert child.stdout.readline() == "written\n"      # holds its ticket, line not synced
    done = threading.Event()
    writer = threading.Thread(target=lambda: (store.collection("others").insert(
        {"name": "fast"}), done.set()))
    writer.start()
    # the fast writer's line is durable and it waits; the feed stays at "first"
    assert not done.wait(0.5)
    assert store.feed.last() == 1
    assert [e["name"] for e in store.feed.read(0)] == ["first"]
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline() == "returned\n"
    writer.join(timeout=30)
    assert done.is_set()
    child.communicate(timeout=30)
    entries = store.feed.read(0)
    _check_gap_free(entries)
    assert [e["name"] for e in entries] == ["first", "slow", "fast"]


@pytest.mark.timeout(60)
def test_a_compaction_waits_until_its_kinds_tickets_are_published(tmp_path):
    """A writer of `others` died durable, its ticket held back by an earlier one of
    `things` still in flight: a compaction of `others`, which drops the journal line its
    entry is made from, waits until that entry is published."""
    store = Store(tmp_path)
    store.collection("things").insert({"name": "first"})
    child = _child(_HELD_BEFORE_FDATASYNC, tmp_path, stdin=subprocess.PIPE)
    assert child.stdout.readline() == "written\n"
    waiter = _child(_WRITE_KIND, tmp_path, "others", 1)
    others = tmp_path / "others.journal"
    deadline = time.monotonic() + 30
    while not (others.exists() and b"others-0" in others.read_bytes()):
        assert time.monotonic() < deadline, "the waiter never wrote its line"
        time.sleep(0.01)
    # killed durable and waiting behind "slow", or (under load) still before its
    # fdatasync: either way its slot is resolved only as a committed line held back
    time.sleep(0.2)
    waiter.kill()
    waiter.communicate()
    done = threading.Event()
    compactor = threading.Thread(target=lambda: (store.collection("others").compact(),
                                                 done.set()))
    compactor.start()
    assert not done.wait(0.5)
    assert b"others-0" in others.read_bytes(), "the journal line went before its entry"
    child.stdin.write("go\n")
    child.stdin.flush()
    child.communicate(timeout=30)
    compactor.join(timeout=30)
    assert done.is_set()
    entries = store.feed.read(0)
    _check_gap_free(entries)
    assert [e["name"] for e in entries] == ["first", "slow", "others-0"]
    assert [r["name"] for r in Store(tmp_path).collection("others").records()] == ["others-0"]
    assert b"others-0" not in others.read_bytes()       # compacted into the base


@pytest.mark.timeout(60)
def test_a_power_loss_with_a_durable_line_past_a_lost_one(tmp_path):
    """An earlier ticket's line was still in its fdatasync (lost with the power) while a
    later one of another kind was durable: after the reboot the durable one gets the next
    number (no reader saw any past the lost one), the lost one none, and no gap."""
    store = Store(tmp_path)
    store.collection("things").insert({"name": "first"})
    journal = tmp_path / "things.journal"
    synced = journal.stat().st_size
    child = _child(_HELD_BEFORE_FDATASYNC, tmp_path, stdin=subprocess.PIPE)
    assert child.stdout.readline() == "written\n"
    fast = _child(_WRITE_KIND, tmp_path, "others", 1)
    # the fast writer is durable and waits behind the slow ticket: then the power goes
    others = tmp_path / "others.journal"
    deadline = time.monotonic() + 30
    # the whole line (a read can see a write half-way through)
    while not (others.exists() and b"others-0" in others.read_bytes()
               and others.read_bytes().endswith(b"\n")):
        assert time.monotonic() < deadline, "the fast writer never wrote its line"
        time.sleep(0.01)
    # the waiter first: killed after the slow one, it would resolve the slow one's slot
    # (its line is complete) before the power loss this test plays
    for process in (fast, child):
        process.kill()
        process.communicate()
    assert store.feed.last() == 1
    store.close()
    with open(journal, "r+b") as f:             # the slow line never reached the disk
        f.truncate(synced)
    (tmp_path / ".feed" / "boot").write_text("the boot before\n")
    after = Store(tmp_path)
    after.collection("things").insert({"name": "after-reboot"})
    entries = after.feed.read(0)
    _check_gap_free(entries)
    assert [e["name"] for e in entries] == ["first", "others-0", "after-reboot"]
    assert [r["name"] for r in after.collection("things").records()] == ["first",
                                                                         "after-reboot"]


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
    tickets = struct.Struct("<QQQ")     # format, last published ticket, next ticket
    page = (feed_dir / "feed.lock").read_bytes()
    last, first, size = head.unpack_from(page)
    mark, published, following = tickets.unpack_from(page, head.size)
    assert last == 5 and published == 5     # one journal line (ticket) per entry here
    segment = feed_dir / f"{first:020d}.log"
    kept = b"".join(segment.read_bytes().splitlines(keepends=True)[:2])
    segment.write_bytes(kept + b'{"torn')
    with open(feed_dir / "feed.lock", "r+b") as f:
        # the counter and the tickets share a sector: lost together
        f.write(head.pack(2, first, len(kept)) + tickets.pack(mark, 2, 3))
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
