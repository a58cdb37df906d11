"""Sleep and wake marks (state/wake.py): a write to a kind leaves `.wake/<name>` for each
process asleep on it, and a process going to sleep either is seen by every later writer or
sees their write itself (docs/store.md, "Sleep and wake marks")."""

import math
import os
import subprocess
import threading
import time

import pytest

from state import Store, wake


@pytest.fixture
def store(tmp_path):
    store = Store(str(tmp_path))
    yield store
    store.close()


def generation_of(store):
    return lambda kind: store.collection(kind).lock.settled_generation()[0]


def entries(store, kind):
    folder = wake.sleepers_dir(store.directory, kind)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def marks(store):
    folder = os.path.join(store.directory, wake.WAKE_DIR)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def asleep(store, name, kinds):
    expected = {kind: store.collection(kind).lock.state()[0] for kind in kinds}
    return wake.sleep(store.directory, name, kinds, expected, generation_of(store))


def test_a_write_leaves_a_mark_for_each_sleeper_and_takes_its_entry(store):
    widgets = store.collection("widgets")
    assert asleep(store, "appliance-one", ["widgets", "gadgets"])
    assert asleep(store, "appliance-two", ["widgets"])
    assert entries(store, "widgets") == ["appliance-one", "appliance-two"]
    assert marks(store) == []
    widgets.insert({"n": 1})
    assert marks(store) == ["appliance-one", "appliance-two"]
    assert entries(store, "widgets") == []
    # its entry on the other kind stays until the process starts and forgets it
    assert entries(store, "gadgets") == ["appliance-one"]
    widgets.insert({"n": 2})                  # a mark is made once: nothing else moves
    assert marks(store) == ["appliance-one", "appliance-two"]
    wake.forget(store.directory, "appliance-one")
    assert marks(store) == ["appliance-two"] and entries(store, "gadgets") == []


def test_without_a_sleeper_a_write_leaves_nothing(store):
    store.collection("widgets").insert({"n": 1})
    assert marks(store) == [] and entries(store, "widgets") == []
    assert not os.path.exists(os.path.join(store.directory, wake.SLEEP_DIR))
    # nor does a write to another kind wake a sleeper
    assert asleep(store, "appliance-one", ["widgets"])
    store.collection("gadgets").insert({"n": 1})
    assert marks(store) == [] and entries(store, "widgets") == ["appliance-one"]


def test_a_read_wakes_nobody(store):
    widgets = store.collection("widgets")
    widgets.insert({"n": 1})
    assert asleep(store, "appliance-one", ["widgets"])
    other = Store(store.directory)
    try:
        assert len(other.collection("widgets").records()) == 1
    finally:
        other.close()
    assert marks(store) == []


def test_the_sleeper_that_loses_the_race_sees_the_moved_generation_and_stays(store):
    widgets = store.collection("widgets")
    expected = {"widgets": widgets.lock.state()[0]}
    writer = Store(store.directory)
    try:
        def written_meanwhile(kind):
            # between its entry and its look: the write the sleeper must not miss
            writer.collection("widgets").insert({"n": 1})
            return generation_of(store)(kind)
        assert not wake.sleep(store.directory, "appliance-one", ["widgets"], expected,
                              written_meanwhile)
    finally:
        writer.close()
    # it stays up: its entry and the mark the writer made are gone
    assert entries(store, "widgets") == [] and marks(store) == []


def test_a_sleeper_racing_a_writer_200_times_never_misses_a_write(store):
    """A thread writes without pause while the sleeper goes to sleep 200 times: each time
    it either sees a moved generation or, once the generation moves, finds its mark."""
    stop = threading.Event()
    written = []

    def hammer():
        writer = Store(store.directory)
        try:
            things = writer.collection("widgets")
            while not stop.is_set():
                written.append(things.insert({"n": len(written)})["uuid"])
        finally:
            writer.close()

    thread = threading.Thread(target=hammer)
    thread.start()
    outcomes = {"saw the write": 0, "woken": 0}
    try:
        lock = store.collection("widgets").lock
        for _ in range(200):
            expected = {"widgets": lock.settled_generation()[0]}
            if not wake.sleep(store.directory, "appliance-racer", ["widgets"], expected,
                              generation_of(store)):
                outcomes["saw the write"] += 1
                continue
            # asleep: some write moves the generation; then the mark must be there
            while lock.settled_generation()[0] == expected["widgets"]:
                assert thread.is_alive()
            assert wake.woken(store.directory, "appliance-racer"), expected
            outcomes["woken"] += 1
            wake.forget(store.directory, "appliance-racer", ["widgets"])
    finally:
        stop.set()
        thread.join()
    assert sum(outcomes.values()) == 200 and written, outcomes


def test_first_boot_s_clear_makes_both_folders_and_drops_what_the_last_boot_left(store):
    assert asleep(store, "appliance-one", ["widgets"])
    store.collection("widgets").insert({"n": 1})
    assert asleep(store, "appliance-two", ["gadgets"])
    assert marks(store) == ["appliance-one"]
    wake.clear(store.directory)
    assert marks(store) == [] and entries(store, "gadgets") == []
    for folder in (wake.SLEEP_DIR, wake.WAKE_DIR):
        assert os.path.isdir(os.path.join(store.directory, folder))


def test_a_mark_a_root_writer_made_is_removed_by_the_appliance_user(store):
    """The node agent's writes go through the API (the appliance user), but first boot and
    an admin's command run as root: a mark root made is root's file in the appliance user's
    `.wake/`, which that user may still remove (a folder's permission, no sticky bit)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to write as root and then act as another user")
    nobody = 65534
    assert asleep(store, "appliance-one", ["widgets"])
    for folder in (wake.WAKE_DIR, wake.SLEEP_DIR, os.path.join(wake.SLEEP_DIR, "widgets")):
        os.chown(os.path.join(store.directory, folder), nobody, nobody)
    store.collection("widgets").insert({"n": 1})          # as root
    mark = wake.mark_path(store.directory, "appliance-one")
    assert os.stat(mark).st_uid == 0
    os.chmod(store.directory, 0o711)                      # as first boot leaves it
    pid = os.fork()
    if pid == 0:
        try:
            # from inside the state: pytest's folders above it are root's alone
            os.chdir(store.directory)
            os.setgid(nobody)
            os.setuid(nobody)
            wake.forget(".", "appliance-one", ["widgets"])
            os._exit(0 if not os.path.exists(wake.mark_path(".", "appliance-one")) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert marks(store) == []


# ---- timed sleeps: `.sleep/.at/<name>`, its mtime the wake time -----------------------------

def timed(store):
    folder = os.path.join(store.directory, wake.SLEEP_DIR, wake.TIMED_DIR)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_a_timed_sleep_leaves_an_entry_due_at_its_time_and_a_write_still_wakes_it(store):
    wake_at = time.time() + 600.2
    expected = {"widgets": store.collection("widgets").lock.state()[0]}
    assert wake.sleep(store.directory, "appliance-one", ["widgets"], expected,
                      generation_of(store), wake_at=wake_at)
    entry = wake.timed_path(store.directory, "appliance-one")
    # whole seconds, rounded up: its waker must not wake it before its time
    assert os.stat(entry).st_mtime == math.ceil(wake_at)
    assert timed(store) == ["appliance-one"] and entries(store, "widgets") == ["appliance-one"]
    # made under another name and renamed: nothing of it is left beside it
    assert sorted(os.listdir(os.path.join(store.directory, wake.SLEEP_DIR))) == \
        [wake.TIMED_DIR, "widgets"]
    # a write wakes it through its kind entry as before, timer or not
    store.collection("widgets").insert({"n": 1})
    assert marks(store) == ["appliance-one"]
    # its start forgets the timed entry with the rest
    wake.forget(store.directory, "appliance-one")
    assert timed(store) == [] and marks(store) == []


def test_a_timed_sleep_that_loses_the_race_leaves_no_timed_entry(store):
    expected = {"widgets": store.collection("widgets").lock.state()[0]}
    store.collection("widgets").insert({"n": 1})
    assert not wake.sleep(store.directory, "appliance-one", ["widgets"], expected,
                          generation_of(store), wake_at=time.time() + 60)
    assert timed(store) == [] and entries(store, "widgets") == []


def test_first_boot_s_clear_drops_the_timed_entries_of_the_last_boot(store):
    wake.sleep_until(store.directory, "appliance-one", time.time() + 60)
    wake.clear(store.directory)
    assert timed(store) == []
    assert os.path.isdir(os.path.join(store.directory, wake.SLEEP_DIR, wake.TIMED_DIR))


# the image's waker of timed sleepers, run here as it runs there (appliance-wake.service)
WAKE_DUE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "image-build", "files", "appliance", "usr", "lib",
    "appliance", "wake-due")


def wait_until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_the_waker_marks_each_due_entry_leaves_a_future_one_and_exits_once_none_is_left(
        store):
    """The shell loop (no Python), a real process against a state folder: a due entry
    becomes its mark and goes; a future one stays, and the loop waits for it (its sleep cut
    to 1 s here, APPLIANCE_WAKE_CHECK_SECONDS); once nothing is timed it exits."""
    wake.clear(store.directory)
    wake.sleep_until(store.directory, "appliance-due", time.time() - 10)
    wake.sleep_until(store.directory, "appliance-later", time.time() + 3600)
    env = dict(os.environ, APPLIANCE_WAKE_CHECK_SECONDS="1")
    loop = subprocess.Popen([WAKE_DUE, store.directory], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: marks(store) == ["appliance-due"], 20, "the due entry's mark")
        assert timed(store) == ["appliance-later"]
        time.sleep(1.5)                                   # a round more: still waiting
        assert loop.poll() is None and marks(store) == ["appliance-due"]
        # its time passes (as a sleeper's entry made now for the past would be)
        past = time.time() - 1
        os.utime(wake.timed_path(store.directory, "appliance-later"), (past, past))
        out, err = loop.communicate(timeout=20)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.communicate()
    assert loop.returncode == 0, err
    assert marks(store) == ["appliance-due", "appliance-later"] and timed(store) == []
    assert [line.split(" (")[0] for line in out.splitlines()] == \
        ["woke appliance-due", "woke appliance-later"]


def test_the_waker_started_with_nothing_timed_exits_at_once(store):
    wake.clear(store.directory)
    done = subprocess.run([WAKE_DUE, store.directory], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 0 and done.stdout == "" and marks(store) == []


def test_the_waker_removes_what_is_no_timed_entry_so_that_the_folder_empties(store):
    """appliance-wake.path starts the loop while the folder is not empty: anything left in
    it that is no entry (a dot name, a folder) would start it again and again."""
    wake.clear(store.directory)
    folder = os.path.join(store.directory, wake.SLEEP_DIR, wake.TIMED_DIR)
    open(os.path.join(folder, ".stray"), "w").close()
    os.mkdir(os.path.join(folder, "appliance-folder"))
    done = subprocess.run([WAKE_DUE, store.directory], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 0, done.stderr
    assert os.listdir(folder) == [] and marks(store) == []
    assert sorted(done.stdout.splitlines()) == [
        "removed .stray: not a timed entry", "removed appliance-folder: not a timed entry"]
