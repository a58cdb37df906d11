"""daemons.base: reconcile on change, retry with back-off, prompt stop on signals."""

import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.apiserver import free_port
from tests import processes

from appliance import config
from daemons import DAEMONS, module_of
from daemons.base import Daemon
from state import Store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def settings_for(directory):
    return dict(config.DEFAULTS, state_dir=str(directory))


class Recorder(Daemon):
    name = "recorder"
    kinds = ("widgets",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []
        self.called = threading.Event()

    def reconcile(self, kind):
        self.calls.append((kind, time.monotonic()))
        self.called.set()


class Failing(Recorder):
    retry_first_seconds = 0.1
    failures_left = 10 ** 9

    def reconcile(self, kind):
        super().reconcile(kind)
        if self.failures_left > 0:
            self.failures_left -= 1
            raise RuntimeError("backend unreachable")


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def started(daemon_cls, store, **attributes):
    daemon = daemon_cls(settings_for(store.directory), store=store)
    vars(daemon).update(attributes)
    daemon.start()
    assert daemon.called.wait(5), "no reconcile at start"
    return daemon


@pytest.mark.timeout(30)
def test_reconcile_runs_within_100_ms_of_a_write(store):
    daemon = started(Recorder, store)
    try:
        for _ in range(3):
            daemon.called.clear()
            count = len(daemon.calls)
            store.collection("widgets").insert({"name": "w"})
            written_at = time.monotonic()
            assert daemon.called.wait(2)
            kind, called_at = daemon.calls[count]
            assert kind == "widgets"
            assert called_at - written_at < 0.1
    finally:
        daemon.stop()


@pytest.mark.timeout(30)
def test_failing_reconcile_backs_off_instead_of_spinning(store, caplog):
    caplog.set_level(logging.ERROR, logger="daemons.recorder")
    daemon = started(Failing, store)
    try:
        # Changes during the back-off must not cut it short.
        for i in range(10):
            store.collection("widgets").insert({"name": f"w{i}"})
            time.sleep(0.1)
        # 0.1 s doubling from the first call: calls at 0, 0.1, 0.3, 0.7 within ~1 s.
        assert 3 <= len(daemon.calls) <= 6, daemon.calls
        assert daemon._worker.is_alive()
    finally:
        daemon.stop()
    assert "reconcile of widgets failed" in caplog.text
    assert "backend unreachable" in caplog.text


@pytest.mark.timeout(30)
def test_success_after_failures_resets_the_back_off(store):
    daemon = started(Failing, store, failures_left=2)
    try:
        deadline = time.monotonic() + 5
        while len(daemon.calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(daemon.calls) == 3      # failed, failed, succeeded
        daemon.called.clear()
        store.collection("widgets").insert({"name": "after"})
        written_at = time.monotonic()
        assert daemon.called.wait(2)
        assert daemon.calls[-1][1] - written_at < 0.1
    finally:
        daemon.stop()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_process_with_exit_code_0(tmp_path, signum):
    config_file = tmp_path / "appliance.yaml"
    config_file.write_text("{}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    # the dns daemon binds its port: a free one, so parallel runs never clash on 5353
    env.update(APPLIANCE_STATE_DIR=str(tmp_path / "var"), APPLIANCE_CONFIG=str(config_file),
               APPLIANCE_DNS_PORT=str(free_port()))
    proc = subprocess.Popen([sys.executable, "-m", "daemons.dns"], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "started; watching" in line:
                break
        else:
            pytest.fail(f"daemon exited before starting: {proc.wait()}")
        # ~1 s is the bound; the margin absorbs a loaded test machine.
        assert processes.stop(proc, 2, signum) == 0
    finally:
        processes.stop(proc, signum=signal.SIGKILL)


@pytest.mark.parametrize("name", DAEMONS)
def test_every_listed_daemon_has_a_module_and_a_unit(name):
    module = importlib.import_module(module_of(name))
    daemons = [obj for obj in vars(module).values()
               if isinstance(obj, type) and issubclass(obj, Daemon) and obj is not Daemon]
    if name == "agent":
        # the node agent reads no store: it follows its payload over HTTP (docs/agent.md)
        assert daemons == []
    else:
        assert [d.name for d in daemons] == [name]
        # it watches kinds, or runs timed jobs of its own (the backup daemon)
        assert daemons[0].kinds or daemons[0].schedule_jobs is not Daemon.schedule_jobs
    assert callable(module.main)       # what the supervisor runs in the child it forks
    unit = os.path.join(ROOT, "systemd", f"appliance-{name}.service")
    # the image runs backups as a timer's oneshot (docs/backup.md)
    once = " --once" if name == "backup" else ""
    with open(unit) as f:
        assert f"-m {module_of(name)}{once}\n" in f.read()


def test_a_change_brings_forward_a_later_scheduled_reconcile(tmp_path):
    store = Store(str(tmp_path))
    calls = []

    class Timed(Daemon):
        name = "timed"
        kinds = ("things",)
        tick_seconds = 3600

        def reconcile(self, kind):
            calls.append(time.monotonic())

    daemon = Timed(settings={"state_dir": str(tmp_path), "log_level": "INFO"},
                   store=store).start()
    try:
        deadline = time.monotonic() + 2
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        daemon.request_in("things", 30)       # e.g. a per-record retry, far away
        before = len(calls)
        store.collection("things").insert({"n": 1})
        deadline = time.monotonic() + 2
        while len(calls) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) > before, "the change waited for the 30 s timer"
    finally:
        daemon.stop()
