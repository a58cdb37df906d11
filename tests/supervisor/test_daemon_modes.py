"""daemons.base's shared modes: the whole pass skipped when nothing moved, and per-key
back-off. The shell's own thread is not started here: each test calls the worker's step
(_reconcile_guarded) itself, so what runs is decided by the store and a clock the test
moves, never by timing."""

import pytest

from appliance import config
from daemons.base import PASS, Daemon
from state import Store


def settings_for(directory):
    return dict(config.DEFAULTS, state_dir=str(directory))


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Whole(Daemon):
    name = "whole"
    kinds = ("widgets", "gadgets")
    whole_pass = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passes = 0
        self.wait = None
        self.due = False
        self.fail = False
        self.write_once = False

    def pass_due(self):
        return self.due

    def reconcile_pass(self):
        self.passes += 1
        if self.fail:
            raise RuntimeError("backend unreachable")
        if self.write_once:
            self.write_once = False
            self.store.collection("gadgets").insert({"name": "made by the pass"})
        return self.wait


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


@pytest.fixture
def whole(store):
    return Whole(settings_for(store.directory), store=store)


def step(daemon):
    daemon._reconcile_guarded(PASS)
    return daemon.passes


def test_a_pass_is_skipped_when_no_watched_kind_moved(whole, store):
    assert step(whole) == 1
    assert step(whole) == 1 and step(whole) == 1          # nothing moved: skipped
    store.collection("widgets").insert({"name": "w"})
    assert step(whole) == 2
    assert step(whole) == 2
    store.collection("unwatched").insert({"name": "x"})
    assert step(whole) == 2                                # not a watched kind


def test_every_kind_is_coalesced_into_the_one_pass(whole):
    whole.request("widgets")
    whole.request("gadgets")
    whole.request_in("widgets", 5)
    assert list(whole._due) == [PASS]


def test_what_the_pass_wrote_itself_wakes_it_once_more_then_it_rests(whole):
    whole.write_once = True
    assert step(whole) == 1
    assert step(whole) == 2                                # its own write moved gadgets
    assert step(whole) == 2


def test_a_timer_the_pass_asked_for_or_pass_due_runs_it_though_nothing_moved(whole):
    whole.wait = 0.0
    assert step(whole) == 1
    whole.wait = None
    assert step(whole) == 2                                # the timer was due
    assert step(whole) == 2
    whole.due = True
    assert step(whole) == 3 and step(whole) == 4


def test_a_failed_pass_is_run_again_though_nothing_moved(whole):
    whole.fail = True
    assert step(whole) == 1
    assert whole._backoff.failing(PASS)                    # backed off, not spinning
    whole.fail = False
    assert step(whole) == 2
    assert not whole._backoff.failing(PASS)                # a success resets it
    assert step(whole) == 2


class PerRecord(Daemon):
    name = "per-record"
    kinds = ("widgets",)
    retry_first_seconds = 1.0
    retry_max_seconds = 4.0


def test_a_failing_key_backs_off_alone_doubling_to_the_cap_and_resets_on_success(store):
    daemon = PerRecord(settings_for(store.directory), store=store)
    clock = Clock()
    daemon._backoff.clock = clock
    records = [{"uuid": "a"}, {"uuid": "b"}]
    broken = {"a"}
    done = []

    def work(record):
        done.append(record["uuid"])
        if record["uuid"] in broken:
            raise RuntimeError("node unreachable")

    assert daemon.each_key("widgets", records, work) == [records[0]]
    assert done == ["a", "b"]
    assert "widgets" in daemon._due                        # woken when the wait ends
    done.clear()
    daemon.each_key("widgets", records, work)
    assert done == ["b"]                                   # a waits, b is not held back
    waits = []
    for _ in range(4):
        clock.now = daemon._backoff.until(("widgets", "a"))
        before = clock.now
        daemon.each_key("widgets", records[:1], work)
        waits.append(daemon._backoff.until(("widgets", "a")) - before)
    assert waits == [2.0, 4.0, 4.0, 4.0]                   # doubling up to the cap
    broken.clear()
    clock.now = daemon._backoff.until(("widgets", "a"))
    assert daemon.each_key("widgets", records, work) == []
    assert not daemon._backoff.failing(("widgets", "a"))
    done.clear()
    daemon.each_key("widgets", records, work)
    assert done == ["a", "b"]                              # reset: tried at once
