import os
import threading
import time

import orjson
import pytest
from tinydb import TinyDB

from state import ChangeWatch, DuplicateKey, NotFound, RevisionConflict, Store, order_key


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def test_records_carry_bookkeeping_and_revision_grows(store):
    things = store.collection("things")
    created = things.insert({"name": "a"})
    assert created["revision"] == 1
    assert created["created_at"] == created["updated_at"]
    assert created["created_at"].endswith("Z")
    updated = things.update(created["uuid"], {"name": "b", "revision": 99, "uuid": "x"})
    assert updated["revision"] == 2
    assert updated["uuid"] == created["uuid"]
    assert updated["created_at"] == created["created_at"]
    assert updated["updated_at"] > created["updated_at"]


def test_compare_and_set_refuses_stale_revision(store):
    things = store.collection("things")
    rec = things.insert({"n": 0})
    things.update(rec["uuid"], {"n": 1}, expect_revision=1)
    with pytest.raises(RevisionConflict) as err:
        things.update(rec["uuid"], {"n": 2}, expect_revision=1)
    assert err.value.actual == 2
    assert things.require(rec["uuid"])["n"] == 1


def test_unique_keys_are_enforced_on_insert_and_update(store):
    things = store.collection("things", unique=[("name", "project_id")])
    a = things.insert({"name": "a", "project_id": "p1"})
    things.insert({"name": "a", "project_id": "p2"})
    with pytest.raises(DuplicateKey):
        things.insert({"name": "a", "project_id": "p1"})
    b = things.insert({"name": "b", "project_id": "p1"})
    with pytest.raises(DuplicateKey):
        things.update(b["uuid"], {"name": "a"})
    with pytest.raises(DuplicateKey):
        things.insert({"uuid": a["uuid"], "name": "c", "project_id": "p9"})
    # the failed writes changed nothing, and a freed key can be taken again
    assert things.count() == 3
    things.delete(a["uuid"])
    things.update(b["uuid"], {"name": "a"})


def test_duplicate_inside_one_batch_is_refused_whole(store):
    things = store.collection("things", unique=[("name",)])
    with pytest.raises(DuplicateKey):
        things.insert_many([{"name": "x"}, {"name": "y"}, {"name": "x"}])
    assert things.count() == 0


def test_delete_and_not_found(store):
    things = store.collection("things")
    rec = things.insert({})
    assert things.delete(rec["uuid"])["uuid"] == rec["uuid"]
    with pytest.raises(NotFound):
        things.delete(rec["uuid"])
    assert things.get(rec["uuid"]) is None


def test_another_process_view_sees_writes(tmp_path):
    """Two Store objects stand for two processes: each has its own cache."""
    one, two = Store(tmp_path).collection("things"), Store(tmp_path).collection("things")
    assert two.count() == 0
    rec = one.insert({"name": "a"})
    assert two.require(rec["uuid"])["name"] == "a"
    one.update(rec["uuid"], {"name": "b"})
    assert two.require(rec["uuid"])["name"] == "b"
    two.insert({"name": "c"})       # must not reuse a doc id or drop one's write
    assert one.count() == 2


def test_default_order_is_creation_then_uuid(store):
    things = store.collection("things")
    made = [things.insert({"i": i})["uuid"] for i in range(50)]
    assert [r["uuid"] for r in things.records()] == made


def test_returned_records_do_not_alias_the_cache(store):
    things = store.collection("things")
    rec = things.insert({"name": "a"})
    rec["name"] = "changed"
    assert things.require(rec["uuid"])["name"] == "a"


def test_files_are_private(store):
    import os
    import stat
    store.collection("things").insert({})
    for path in store.files_of("things"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.directory).st_mode) & 0o077 == 0


def test_private_file_exclusive_first_writer_wins(store):
    assert store.write_private("key", b"one", exclusive=True) == b"one"
    assert store.write_private("key", b"two", exclusive=True) == b"one"
    assert store.read_private("key") == b"one"


def test_watch_calls_subscriber_once_per_change(tmp_path):
    writer = Store(tmp_path).collection("things")
    watch = ChangeWatch(Store(tmp_path), rescan_seconds=0.5).start()
    called = threading.Event()
    calls = []

    def on_change(kind):
        calls.append(kind)
        called.set()

    try:
        watch.subscribe("things", on_change)
        writer.insert({"name": "a"})
        assert called.wait(2.0)
        time.sleep(0.7)     # past a re-scan: no second call for the same change
        assert calls == ["things"]
    finally:
        watch.stop()


def test_rescan_finds_change_without_events(tmp_path):
    watch = ChangeWatch(Store(tmp_path), rescan_seconds=0.3)   # not started: no inotify
    calls = []
    watch.subscribe("things", calls.append)
    Store(tmp_path).collection("things").insert({})
    watch.start()
    watch._observer.unschedule_all()       # make sure only the re-scan can see it
    try:
        deadline = time.monotonic() + 3
        while not calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert calls == ["things"]
    finally:
        watch.stop()


def test_update_many_skips_records_that_moved_on(store):
    things = store.collection("things")
    a, b, c = (things.insert({"n": i}) for i in range(3))
    things.update(b["uuid"], {"n": 10})                   # b is now at revision 2
    written = things.update_many({a["uuid"]: (1, {"n": 1}), b["uuid"]: (1, {"n": 11}),
                                  c["uuid"]: (1, {"n": 2, "revision": 50}),
                                  "missing": (1, {"n": 0})})
    assert set(written) == {a["uuid"], c["uuid"]}
    assert things.require(a["uuid"])["revision"] == 2
    assert things.require(b["uuid"])["n"] == 10
    assert things.require(c["uuid"])["revision"] == 2


def test_file_order_is_default_order_even_for_batches(store):
    things = store.collection("things")
    things.insert_many([{"i": i} for i in range(200)])
    things.insert({"i": "after"})
    with open(store.files_of("things")[1], "rb") as f:
        journal = [r for line in f.read().splitlines()[1:] for r in orjson.loads(line)["put"]]
    assert journal == sorted(journal, key=order_key)
    things.compact()
    in_file = TinyDB(store.path_of("things")).table("things").all()
    assert ([r["uuid"] for r in in_file] == [r["uuid"] for r in journal]
            == [r["uuid"] for r in Store(store.directory).collection("things").records()])


def test_opening_a_kind_writes_nothing_so_its_watchers_sleep(tmp_path):
    """The image's path units start a daemon at the first write to its kinds' lock files
    (docs/on-demand-daemons.md): a process that only opens and reads a kind must not
    touch them."""
    first = Store(tmp_path)
    first.collection("things").insert({"name": "a"})
    lock = tmp_path / ".locks" / "things.lock"
    untouched = tmp_path / ".locks" / "others.lock"
    before = lock.stat().st_mtime_ns, lock.read_bytes()
    second = Store(tmp_path)
    assert [r["name"] for r in second.collection("things").records()] == ["a"]
    assert list(second.collection("others").records()) == []
    assert (lock.stat().st_mtime_ns, lock.read_bytes()) == before
    # made with its counters at zero (linked into place, never opened for writing), so
    # that readers map them: a kind never written costs its readers no syscall either
    assert untouched.read_bytes() == bytes(16)
    made = untouched.stat().st_mtime_ns
    assert list(Store(tmp_path).collection("others").records()) == []
    assert untouched.stat().st_mtime_ns == made
    assert sorted(p.name for p in (tmp_path / ".locks").iterdir()
                  if p.name.startswith(("things", "others"))) == ["others.lock", "things.lock"]
    # a kind never written reads as settled at generation 0, and its first write moves it
    others = second.collection("others")
    assert others.lock.state() == (0, True)
    assert others.lock._view is not None
    first.collection("others").insert({"name": "b"})
    assert [r["name"] for r in others.records()] == ["b"]
    assert others.lock.state()[0] >= 1


def lock_files_open_for_writing(directory):
    """The kinds' lock files under `directory` this process holds open with write access
    (/proc/self/fdinfo)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            with open(f"/proc/self/fdinfo/{fd}") as f:
                flags = next(int(line.split()[1], 8) for line in f
                             if line.startswith("flags:"))
        except OSError:
            continue
        name = os.path.basename(target)
        if target.startswith(str(directory) + "/.locks/") and name != "in-use.lock" \
                and flags & os.O_ACCMODE != os.O_RDONLY:
            found.append(name)
    return sorted(found)


def test_a_process_holds_a_kind_s_lock_file_open_for_writing_only_once_it_wrote(tmp_path):
    """Closing a file open for writing is an IN_CLOSE_WRITE even when nothing was written:
    a process that only read a kind must not leave one behind when it exits."""
    writer = Store(tmp_path)
    writer.collection("things").insert({"name": "a"})
    writer.close()
    reader = Store(tmp_path)
    assert len(list(reader.collection("things").records())) == 1
    assert list(reader.collection("others").records()) == []
    with reader.all_locked(changed=False):
        pass
    assert lock_files_open_for_writing(tmp_path) == []
    reader.collection("others").insert({"name": "b"})
    assert lock_files_open_for_writing(tmp_path) == ["others.lock"]
    reader.close()
    assert lock_files_open_for_writing(tmp_path) == []


def test_a_read_only_whole_state_section_writes_no_lock_file(tmp_path):
    store = Store(tmp_path)
    store.collection("things").insert({"name": "a"})
    lock = tmp_path / ".locks" / "things.lock"
    before = lock.stat().st_mtime_ns, lock.read_bytes()
    time.sleep(0.01)
    with Store(tmp_path).all_locked(changed=False):
        pass
    assert (lock.stat().st_mtime_ns, lock.read_bytes()) == before


def test_opening_a_kind_removes_the_temp_files_of_a_writer_that_died(tmp_path):
    store = Store(tmp_path)
    store.collection("things").insert({"name": "a"})
    for name in (".things.json.1234.tmp", ".things.journal.1234.tmp"):
        (tmp_path / name).write_bytes(b"half a write")
    (tmp_path / ".other.json.1.tmp").write_bytes(b"another kind's")
    reopened = Store(tmp_path)
    assert [r["name"] for r in reopened.collection("things").records()] == ["a"]
    assert not (tmp_path / ".things.json.1234.tmp").exists()
    assert not (tmp_path / ".things.journal.1234.tmp").exists()
    assert (tmp_path / ".other.json.1.tmp").exists()


def test_by_key_finds_a_record_by_its_unique_key_and_follows_other_writers(tmp_path):
    """The lists' lookup of a whole unique key (appliance/api/listing.py): the unique
    index the writes keep, in a process that never wrote too (another Store over the same
    directory stands for another process)."""
    writer, reader = Store(tmp_path), Store(tmp_path)
    written = writer.collection("things", unique=[("name", "group")])
    a = written.insert({"name": "a", "group": "g1"})
    written.insert({"name": "a", "group": "g2"})
    things = reader.collection("things", unique=[("name", "group")])
    assert things.by_key(("name", "group"), ("a", "g1"))["uuid"] == a["uuid"]
    assert things.by_key(("name", "group"), ("a", "g3")) is None
    written.update(a["uuid"], {"name": "b"})
    assert things.by_key(("name", "group"), ("a", "g1")) is None
    assert things.by_key(("name", "group"), ("b", "g1"))["uuid"] == a["uuid"]
    written.delete(a["uuid"])
    assert things.by_key(("name", "group"), ("b", "g1")) is None
    with pytest.raises(ValueError):
        things.by_key(("name",), ("a",))        # not a unique key: no answer to trust
    writer.close()
    reader.close()


def test_version_moves_with_every_change_another_process_makes_too(tmp_path):
    """What the API's cache of lists keys on: equal versions, equal records."""
    writer, reader = Store(tmp_path), Store(tmp_path)
    written = writer.collection("things")
    things = reader.collection("things")
    rec = written.insert({"n": 0})
    seen = [things.version()]
    assert things.version() == seen[-1]         # no change, no move
    for change in (lambda: written.update(rec["uuid"], {"n": 1}),
                   lambda: written.insert({"n": 2}),
                   lambda: written.delete(rec["uuid"]),
                   lambda: things.insert({"n": 3})):
        change()
        seen.append(things.version())
        assert seen[-1] != seen[-2]
    assert len(set(seen)) == len(seen)
    assert [r["n"] for r in things.records()] == [2, 3]
    writer.close()
    reader.close()


def test_stamp_is_void_after_any_change_of_its_kinds_here_or_elsewhere_and_after_close(
        tmp_path):
    """What the API's cache of principals keys on (appliance/iam/auth.py): a stamp of
    several kinds holds until a write to any of them, in this Store or in another (another
    process's, as far as the files go), and never across close()."""
    writer, reader = Store(tmp_path), Store(tmp_path)
    rec = writer.collection("a").insert({"n": 0})
    writer.collection("b").insert({"n": 0})
    kinds = ("a", "b", "never_written")
    for change in (lambda: writer.collection("a").update(rec["uuid"], {"n": 1}),
                   lambda: writer.collection("b").insert({"n": 2}),
                   lambda: writer.collection("never_written").insert({"n": 3}),
                   lambda: reader.collection("a").delete(rec["uuid"])):
        stamp = reader.stamp(kinds)
        assert reader.unchanged(stamp) and reader.unchanged(stamp)
        writer.collection("unrelated").insert({"n": 0})
        assert reader.unchanged(stamp)              # another kind's write: still holds
        change()
        assert not reader.unchanged(stamp)
        assert reader.unchanged(reader.stamp(kinds))
    stamp = reader.stamp(kinds)
    reader.close()
    assert not reader.unchanged(stamp)             # reopened kinds: a new stamp is needed
    assert reader.unchanged(reader.stamp(kinds))
    writer.close()
    reader.close()


def test_settled_is_unchanged_told_from_memory_and_never_true_where_unchanged_is_not(
        tmp_path):
    """What the API's event loop asks before it answers a kept item GET
    (appliance/api/answers.py): it must never wait, so it may say False where unchanged()
    would have looked at the files; it never says True where unchanged() says False."""
    writer, reader = Store(tmp_path), Store(tmp_path)
    rec = writer.collection("a").insert({"n": 0})
    kinds = ("a", "never_written")
    for change in (lambda: writer.collection("a").update(rec["uuid"], {"n": 1}),
                   lambda: writer.collection("never_written").insert({"n": 3}),
                   lambda: reader.collection("a").update(rec["uuid"], {"n": 2})):
        stamp = reader.stamp(kinds)
        assert reader.settled(stamp) and reader.unchanged(stamp)
        writer.collection("unrelated").insert({"n": 0})
        assert reader.settled(stamp)                # another kind's write: still holds
        change()
        assert not reader.settled(stamp) and not reader.unchanged(stamp)
        # after a read brought the kind up to date, still not: the stamp is of before
        reader.collection("a").records()
        reader.collection("never_written").records()
        assert not reader.settled(stamp)
        assert reader.settled(reader.stamp(kinds))
    stamp = reader.stamp(kinds)
    reader.close()
    assert not reader.settled(stamp)
    writer.close()
    reader.close()
