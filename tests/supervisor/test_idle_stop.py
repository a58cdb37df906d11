"""On-demand daemons stop when idle and start again at the next write of their work
(daemons/base.py, appliance/supervisor.py; docs/on-demand-daemons.md, "Stopping when
idle"): when a daemon may stop, what its idle record names, the stop race, and the first
secret of an idle appliance through `appliance up`."""

import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

import daemons
from appliance import daemon_state
from appliance.supervisor import Generations
from daemons.base import idle_stop_seconds
from daemons.base import MARKS, STAY
from state import Store
from tests import processes

from .test_daemon_base import Failing, Recorder, settings_for
from .test_supervisor import ROOT, Up, child_named

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


def wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"not within {seconds} s: {what}")


@pytest.fixture
def store(tmp_path):
    store = Store(str(tmp_path))
    yield store
    store.close()


@pytest.fixture
def on_demand(monkeypatch):
    """The test daemon `recorder` is on demand, its work any record of `widgets`."""
    monkeypatch.setitem(daemons.ON_DEMAND, "recorder", ("widgets",))


def running(daemon_cls, store, idle_stop_seconds, **attributes):
    daemon = daemon_cls(settings_for(store.directory), store=store)
    daemon.idle_stop_seconds = idle_stop_seconds
    vars(daemon).update(attributes)
    return daemon.start()


@pytest.mark.timeout(30)
def test_a_daemon_without_work_stops_after_its_first_pass(store, on_demand):
    daemon = running(Recorder, store, idle_stop_seconds=3600)
    try:
        record = wait_for(lambda: daemon.idle_record, 10, "the idle stop")
        assert daemon.calls, "it stopped before its first reconcile"
    finally:
        daemon.stop()
    # no record is work: only a write to its on-demand kinds starts it again
    generation = store.collection("widgets").lock.state()[0]
    assert record == {"kinds": {"widgets": generation}, "wake_at": None, "work": False}


@pytest.mark.timeout(30)
def test_a_daemon_with_work_stops_only_after_a_quiet_period(store, on_demand):
    widgets = store.collection("widgets")
    widgets.insert({"n": 0})
    daemon = running(Recorder, store, idle_stop_seconds=1.0)
    try:
        for n in range(1, 8):                  # a write every 0.3 s: never 1 s of quiet
            time.sleep(0.3)
            assert daemon.idle_record is None, f"stopped while written to ({n})"
            widgets.insert({"n": n})
        record = wait_for(lambda: daemon.idle_record, 10, "the idle stop once quiet")
        last_calls = len(daemon.calls)
    finally:
        daemon.stop()
    assert record["work"] is True
    assert record["kinds"] == {"widgets": widgets.lock.state()[0]}
    # every write was reconciled before it stopped
    assert last_calls >= 2


class Renamer(Recorder):
    """Writes to the kind it watches on every reconcile until each widget is named."""

    def reconcile(self, kind):
        super().reconcile(kind)
        widgets = self.store.collection("widgets")
        for record in widgets.records():
            if not record.get("named"):
                widgets.update(record["uuid"], {"named": True})


@pytest.mark.timeout(30)
def test_its_own_writes_are_reconciled_before_it_stops(store, on_demand):
    store.collection("widgets").insert({"n": 1})
    daemon = running(Renamer, store, idle_stop_seconds=0.5)
    quiet_since = daemon._last_change
    try:
        record = wait_for(lambda: daemon.idle_record, 10, "the idle stop")
    finally:
        daemon.stop()
    # its own write is no change from outside: the quiet period ran from its start
    assert daemon._last_change == quiet_since
    # the record names the generation after its own write, which it reconciled again
    assert record["kinds"] == {"widgets": store.collection("widgets").lock.state()[0]}
    assert [r["named"] for r in store.collection("widgets").records()] == [True]


@pytest.mark.timeout(30)
def test_a_retry_due_keeps_it_running(store, on_demand):
    daemon = running(Failing, store, idle_stop_seconds=0.5, retry_max_seconds=0.2)
    try:
        time.sleep(3)
        assert daemon.idle_record is None
        assert len(daemon.calls) > 3            # it kept retrying meanwhile
    finally:
        daemon.stop()


class Timed(Recorder):
    wake = None

    def idle_wake_at(self):
        return self.wake


@pytest.mark.timeout(30)
def test_timed_work_of_its_own_keeps_it_running_or_names_its_wake_time(store, on_demand):
    store.collection("widgets").insert({"n": 1})
    daemon = running(Timed, store, idle_stop_seconds=0.3, wake=STAY)
    try:
        time.sleep(2)
        assert daemon.idle_record is None
        wake = time.time() + 3600
        daemon.wake = wake
        record = wait_for(lambda: daemon.idle_record, 10, "the idle stop")
    finally:
        daemon.stop()
    assert record["wake_at"] == wake


@pytest.mark.timeout(30)
def test_a_timer_it_asked_for_is_its_wake_time(store, on_demand):
    store.collection("widgets").insert({"n": 1})
    daemon = running(Recorder, store, idle_stop_seconds=0.3)
    try:
        wait_for(lambda: daemon.calls, 10, "the first reconcile")
        asked = time.time() + 600
        daemon.request_in("widgets", 600)
        record = wait_for(lambda: daemon.idle_record, 10, "the idle stop")
    finally:
        daemon.stop()
    assert asked - 1 < record["wake_at"] < asked + 1


def test_the_supervisor_reads_generations_as_the_store_writes_them(store):
    generations = Generations(store.directory)
    try:
        assert generations("never_opened") == 0
        widgets = store.collection("widgets")
        assert generations("widgets") == widgets.lock.state()[0]
        widgets.insert({"n": 1})
        assert generations("widgets") == widgets.lock.state()[0] > 0
    finally:
        generations.close()


def test_the_idle_time_is_a_variable_and_zero_turns_it_off():
    assert idle_stop_seconds({}) == 60.0
    assert idle_stop_seconds({"APPLIANCE_IDLE_STOP_SECONDS": "2.5"}) == 2.5
    assert idle_stop_seconds({"APPLIANCE_IDLE_STOP_SECONDS": "0"}) is None
    assert idle_stop_seconds({"APPLIANCE_IDLE_STOP_SECONDS": "soon"}) == 60.0


def test_an_idle_daemon_shows_as_waiting(tmp_path):
    state = str(tmp_path)
    daemon_state.clear(state)
    daemon_state.record_started(state, "delivery")
    daemon_state.record_idle(state, "delivery", {"kinds": {}, "wake_at": None})
    [shown] = daemon_state.states(state, ["delivery"], {"delivery"})
    assert shown["state"] == "waiting" and shown["pid"] is None
    assert "idle" in shown["reason"]


@pytest.mark.timeout(60)
def test_a_write_that_lands_while_the_daemon_stops_starts_it_again(tmp_path):
    """The race: the daemon decided to stop (its idle record is taken), then the kind is
    written before its process ends. The supervisor compares the generations once it has
    reaped it, starts it again, and the new instance reconciles the record."""
    state = tmp_path / "state"
    state.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    log = open(tmp_path / "racer.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "tests.supervisor.idle_racer", str(state)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        written = wait_for(lambda: (state / "raced").exists() and
                           (state / "raced").read_text(), 30, "the write while stopping")
        wait_for(lambda: (state / "handled").exists() and
                 written in (state / "handled").read_text().split(), 30,
                 f"the record {written} reconciled")
        starts = (state / "starts").read_text().split()
        assert len(starts) >= 2, starts
        # and then it stops again, for good: nothing more to do
        wait_for(lambda: (daemon_state.read_record(str(state), "racer") or {}).get("idle"),
                 30, "the second idle stop")
    finally:
        processes.stop(proc)
        log.close()
    text = (tmp_path / "racer.log").read_text()
    assert "race_items moved since: starting it again" in text, text


# ---- in the image's mode: sleep and wake marks (state/wake.py) -------------------------------

def run_alone(state, race):
    """The racer as its systemd unit runs it (APPLIANCE_IDLE_WAKE=marks), to its exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env.update(APPLIANCE_STATE_DIR=str(state), APPLIANCE_IDLE_WAKE="marks",
               APPLIANCE_IDLE_STOP_SECONDS="0.3", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-P", "-m", "tests.supervisor.idle_racer", "marks",
                           race], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stderr


def handled(state):
    path = state / "handled"
    return path.read_text().split() if path.exists() else []


@pytest.mark.timeout(120)
def test_with_marks_a_write_after_it_slept_leaves_its_mark_and_the_next_start_sees_it(
        tmp_path):
    """The race made to happen every time: the daemon slept on its kind and, before its
    process ends, the kind is written. It stops all the same (it cannot see that write),
    and the writer left `.wake/appliance-racer`, which its path unit's PathExists= starts
    it at; the next start consumes the mark and reconciles the record."""
    state = tmp_path
    run_alone(state, "after")
    written = (state / "raced").read_text()
    assert written not in handled(state)
    mark = state / ".wake" / "appliance-racer"
    assert mark.exists()
    assert os.listdir(state / ".sleep" / "race_items") == []     # the writer took the entry
    assert (daemon_state.read_record(str(state), "racer") or {}).get("idle")
    # what the path unit does at the mark: start it again
    run_alone(state, "after")
    assert written in handled(state)
    assert not mark.exists()                                     # consumed at its start
    # asleep again, on its kind, with nothing written since: no mark
    assert os.listdir(state / ".sleep" / "race_items") == ["appliance-racer"]
    assert len((state / "starts").read_text().split()) == 2


@pytest.mark.timeout(120)
def test_with_marks_a_write_before_it_slept_keeps_it_running_until_reconciled(tmp_path):
    """The other side of the race: the write lands after the daemon decided to stop but
    before its look at the generations, so it sees the moved generation, takes its sleep
    entries back, reconciles the record, and only then stops (one start, no mark)."""
    state = tmp_path
    run_alone(state, "before")
    written = (state / "raced").read_text()
    assert written in handled(state)
    assert len((state / "starts").read_text().split()) == 1
    assert not (state / ".wake" / "appliance-racer").exists()
    assert os.listdir(state / ".sleep" / "race_items") == ["appliance-racer"]
    assert (daemon_state.read_record(str(state), "racer") or {}).get("idle")


def test_systemd_s_stop_post_keeps_an_idle_record_as_waiting(tmp_path, monkeypatch):
    """ExecStopPost= (`python -m appliance.daemon_state ended NAME`) after a clean idle
    exit: the daemon shows as waiting, not stopped; after a crash it shows the failure."""
    state = str(tmp_path)
    daemon_state.clear(state)
    monkeypatch.setenv("APPLIANCE_STATE_DIR", state)
    monkeypatch.setenv("SERVICE_RESULT", "success")
    monkeypatch.setenv("EXIT_CODE", "exited")
    monkeypatch.setenv("EXIT_STATUS", "0")
    daemon_state.record_started(state, "delivery")
    daemon_state.record_idle(state, "delivery", {"kinds": {"secret_secrets": 3},
                                                 "wake_at": None, "work": True})
    assert daemon_state.main(["ended", "delivery"]) == 0
    [shown] = daemon_state.states(state, ["delivery"], {"delivery"})
    assert shown["state"] == "waiting" and shown["since"], shown
    # a plain clean stop (systemctl stop) is still "stopped"
    daemon_state.record_started(state, "delivery")
    assert daemon_state.main(["ended", "delivery"]) == 0
    [shown] = daemon_state.states(state, ["delivery"], {"delivery"})
    assert shown["state"] == "stopped", shown
    # and a failure after an idle record is a failure
    daemon_state.record_idle(state, "delivery", {"kinds": {}, "wake_at": None})
    monkeypatch.setenv("SERVICE_RESULT", "exit-code")
    monkeypatch.setenv("EXIT_STATUS", "1")
    assert daemon_state.main(["ended", "delivery"]) == 0
    [shown] = daemon_state.states(state, ["delivery"], {"delivery"})
    assert shown["state"] == "restarting", shown


@pytest.mark.timeout(30)
def test_with_marks_a_timer_of_its_own_stops_it_with_a_timed_entry(store, on_demand, caplog):
    """In the image a daemon whose only reason to stay is a wake time stops all the same:
    asleep on its kinds as any other, and with a timed entry whose mtime is that time, which
    the image's appliance-wake units turn into its mark (docs/on-demand-daemons.md); its
    log says when. A start takes the entry back."""
    store.collection("widgets").insert({"n": 1})
    wake_at = time.time() + 3600.4
    caplog.set_level("INFO", logger="daemons")
    daemon = running(Timed, store, idle_stop_seconds=0.3, wake=wake_at, idle_wake=MARKS)
    try:
        record = wait_for(lambda: daemon.idle_record, 10, "the idle stop")
    finally:
        daemon.stop()
    assert record["wake_at"] == wake_at
    assert os.listdir(os.path.join(store.directory, ".sleep", "widgets")) == \
        ["appliance-recorder"]
    timed = os.path.join(store.directory, ".sleep", ".at", "appliance-recorder")
    # rounded up: its waker compares whole seconds, and must not wake it early
    assert os.stat(timed).st_mtime == math.ceil(wake_at)
    assert re.search(r"its timer wakes it at \S+ \S+ \(in 3(599|600) s\)", caplog.text), \
        caplog.text
    # the next start (its timer's mark, or a write's) forgets it before its first look
    again = running(Timed, store, idle_stop_seconds=3600, idle_wake=MARKS)
    again.stop()
    assert not os.path.exists(timed)


def idle_record_left(wake_at, widgets_generation):
    """The daemon state a `recorder` that stopped idle this boot leaves (daemon_state)."""
    from appliance.processes import boot_id
    return {"name": "recorder", "boot_id": boot_id(), "ended_at": time.time() - 5,
            "idle": {"kinds": {"widgets": widgets_generation}, "wake_at": wake_at,
                     "work": True}}


@pytest.mark.timeout(30)
def test_with_marks_a_start_by_its_timer_stops_once_its_work_is_done(store, on_demand):
    """Its timer passed and nothing it sleeps on was written: the start is the timer's, and
    it stops after its pass, not after the idle time a write's start waits for more."""
    widgets = store.collection("widgets")
    widgets.insert({"n": 1})
    last = idle_record_left(time.time() - 1, widgets.lock.state()[0])
    daemon = Recorder(settings_for(store.directory), store=store)
    daemon.idle_stop_seconds, daemon.idle_wake = 3600, MARKS
    assert daemon.started_by_its_timer(last)
    daemon.start()
    try:
        record = wait_for(lambda: daemon.idle_record, 10, "the stop after its pass")
        assert daemon.calls
    finally:
        daemon.stop()
    assert record["work"] is True


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", ["written since", "timer not due", "no timer",
                                  "another boot", "not idle"])
def test_a_start_that_is_not_its_timers_waits_the_idle_time(store, on_demand, case):
    widgets = store.collection("widgets")
    widgets.insert({"n": 1})
    last = idle_record_left(time.time() - 1, widgets.lock.state()[0])
    if case == "written since":
        widgets.insert({"n": 2})
    elif case == "timer not due":
        last["idle"]["wake_at"] = time.time() + 600
    elif case == "no timer":
        last["idle"]["wake_at"] = None
    elif case == "another boot":
        last["boot_id"] = "another"
    else:
        del last["idle"]
    daemon = Recorder(settings_for(store.directory), store=store)
    daemon.idle_stop_seconds, daemon.idle_wake = 3600, MARKS
    assert not daemon.started_by_its_timer(last)
    daemon.start()
    try:
        wait_for(lambda: daemon.calls, 10, "its first pass")
        time.sleep(1.5)
        assert daemon.idle_record is None, "it stopped at once: a write's start waits"
    finally:
        daemon.stop()


@pytest.mark.timeout(30)
def test_with_marks_a_timer_due_within_the_idle_time_keeps_it_running(store, on_demand):
    """Woken that soon by its timed entry, it would pay a Python start for nothing."""
    daemon = running(Timed, store, idle_stop_seconds=7200, wake=time.time() + 3600,
                     idle_wake=MARKS)
    try:
        time.sleep(2)                   # no work: without the timer it stops at once
        assert daemon.idle_record is None
        daemon.wake = None
        wait_for(lambda: daemon.idle_record, 10, "the idle stop")
    finally:
        daemon.stop()
    assert not os.path.exists(os.path.join(store.directory, ".sleep", ".at",
                                           "appliance-recorder"))


@pytest.mark.timeout(30)
def test_with_marks_the_dbaas_rule_still_keeps_it_running(store, on_demand):
    """STAY (the DBaaS daemon while an instance exists) is not a timer: it stays."""
    store.collection("widgets").insert({"n": 1})
    daemon = running(Timed, store, idle_stop_seconds=0.3, wake=STAY, idle_wake=MARKS)
    try:
        time.sleep(2)
        assert daemon.idle_record is None
        assert not os.path.exists(os.path.join(store.directory, ".sleep"))
    finally:
        daemon.stop()


def test_under_appliance_up_a_daemon_makes_no_sleep_entry(store, on_demand):
    daemon = running(Recorder, store, idle_stop_seconds=0.2)
    try:
        wait_for(lambda: daemon.idle_record, 10, "the idle stop")
    finally:
        daemon.stop()
    assert not os.path.exists(os.path.join(store.directory, ".sleep"))


# ---- through `appliance up` -----------------------------------------------------------------

def call(up, method, path, body=None, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{up.api_port}{path}", method=method, headers=headers,
        data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


@pytest.mark.timeout(180)
def test_under_appliance_up_an_idle_delivery_daemon_stops_and_the_next_secret_starts_it(
        tmp_path):
    up = Up(tmp_path, idle_stop="1")
    try:
        up.wait_line("appliance API is ready at ")
        password = (up.state_dir / "admin-password").read_text().strip()
        token = call(up, "POST", "/v1/iam/clients/default/actions/get_token/invoke",
                     {"grant_type": "password", "username": "admin",
                      "password": password})["access_token"]

        def delivery():
            return next(d for d in call(up, "GET", "/v1/system/daemons", token=token)
                        if d["name"] == "delivery")
        # no secret is work: it stops after its first pass, and shows as waiting
        wait_for(lambda: delivery()["state"] == "waiting" and
                 child_named(up.proc.pid, "delivery") is None, 60, "delivery idle")
        secret = call(up, "POST", "/v1/secret/secrets", {
            "name": "first", "project_id": ADMIN_PROJECT, "constructor": {"kind": "plain"},
            "value": "v"}, token=token)
        wait_for(lambda: call(up, "GET", f"/v1/secret/secrets/{secret['uuid']}",
                              token=token)["status"] == "ACTIVE", 60, "the secret ACTIVE")
        assert delivery()["state"] == "running"
        # with its work done, quiet for 1 s, it stops again
        wait_for(lambda: delivery()["state"] == "waiting", 60, "delivery idle again")
        assert "delivery stopped while idle" in up.full_log()
    finally:
        up.close()


def test_the_backup_daemon_stops_when_idle_only_without_a_schedule(tmp_path):
    """A restarted scheduler counts its next time from its own start (a daily backup at
    03:00 woken at 03:00 would wait for tomorrow): with a schedule it stays."""
    from daemons.backup import Backup
    from appliance.supervisor import IDLE_STOPPERS
    assert "backup" in IDLE_STOPPERS
    store = Store(str(tmp_path))
    try:
        plain = Backup(settings_for(tmp_path), store=store)
        assert plain.idle_wake_at() is None
        scheduled = Backup(dict(settings_for(tmp_path), backup_schedule="daily at 03:00",
                                backup_dir=str(tmp_path / "backups")), store=store)
        assert scheduled.idle_wake_at() == STAY
    finally:
        store.close()
