"""Scheduled backups: the schedule and retention settings (validated with clear errors),
pruning that touches only scheduled backups, and the backup daemon writing and pruning."""

import datetime
import os
import subprocess
import sys
import time

import pytest
import schedule

from appliance import config
from appliance.backup_schedule import ScheduleError, parse_schedule, timer_unit
from daemons import DAEMONS
from daemons.backup import Backup
from state import Store
from state import backup as archive
from tests.backup.conftest import ROOT, clean_environ


@pytest.mark.parametrize("text, unit, interval, at", [
    ("daily at 03:00", "days", 1, datetime.time(3, 0)),
    ("Daily  at 23:59", "days", 1, datetime.time(23, 59)),
    ("every 1 minute", "minutes", 1, None),
    ("every 15 minutes", "minutes", 15, None),
    ("every 6 hours", "hours", 6, None),
])
def test_schedules_that_are_understood(text, unit, interval, at):
    job = parse_schedule(text)(schedule.Scheduler()).do(lambda: None)
    assert (job.unit, job.interval, job.at_time) == (unit, interval, at)


@pytest.mark.parametrize("settings, message", [
    ({"backup_schedule": "weekly", "backup_dir": "/x"}, "backup_schedule: expected 'daily at "
                                                        "HH:MM', 'every N minutes' or "
                                                        "'every N hours', not 'weekly'"),
    ({"backup_schedule": "daily at 24:00", "backup_dir": "/x"}, "not 'daily at 24:00'"),
    ({"backup_schedule": "every 0 minutes", "backup_dir": "/x"}, "not 'every 0 minutes'"),
    ({"backup_schedule": "every 5 seconds", "backup_dir": "/x"}, "not 'every 5 seconds'"),
    ({"backup_schedule": "daily at 03:00"}, "backup_dir: where scheduled backups go; required"),
    ({"backup_keep": 0}, "backup_keep must be 1 or more, not 0"),
    ({"backup_keep": "many"}, "backup_keep must be an integer, not 'many'"),
])
def test_bad_backup_settings_are_refused_clearly(tmp_path, settings, message):
    file = tmp_path / "appliance.yaml"
    file.write_text("".join(f"{k}: {v!r}\n" for k, v in settings.items()))
    with pytest.raises(config.ConfigError) as refused:
        config.load(config_file=str(file), environ={})
    assert message in str(refused.value)


def test_backup_settings_from_the_file_and_the_environment(tmp_path):
    file = tmp_path / "appliance.yaml"
    file.write_text("backup_schedule: every 30 minutes\nbackup_dir: backups\nbackup_keep: 3\n")
    loaded = config.load(config_file=str(file), environ={"APPLIANCE_BACKUP_KEEP": "5"})
    assert loaded["backup_schedule"] == "every 30 minutes"
    assert loaded["backup_dir"] == os.path.abspath("backups") and loaded["backup_keep"] == 5
    assert config.load(environ={})["backup_schedule"] is None     # off unless set


def test_prune_keeps_the_newest_and_touches_nothing_else(tmp_path):
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)
    names = [archive.scheduled_name(start + datetime.timedelta(hours=h)) for h in range(6)]
    others = ["notes.txt", "appliance-backup-manual.tar.gz", ".partial.tmp"]
    for name in names + others:
        (tmp_path / name).write_bytes(b"x")
    assert archive.prune(str(tmp_path), 2) == names[:4]
    assert sorted(os.listdir(tmp_path)) == sorted(names[4:] + others)


def settings_for(tmp_path, **extra):
    return config.load(environ={}, overrides={
        "state_dir": str(tmp_path / "state"), "backup_dir": str(tmp_path / "backups"),
        **extra})


def wait_for(predicate, what):
    # the worker wakes at least once a second to run due jobs; a busy machine is slower
    deadline = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_the_daemon_backs_up_on_schedule_and_prunes_to_keep(tmp_path):
    store = Store(str(tmp_path / "state"))
    store.collection("things").insert_many([{"n": i} for i in range(10)])
    settings = settings_for(tmp_path, backup_schedule="every 1 minute", backup_keep=2)
    daemon = Backup(settings).start()
    try:
        assert daemon.job.unit == "minutes" and daemon.job.interval == 1
        folder = settings["backup_dir"]
        seen = []
        for round_ in range(4):
            # one minute is long for a test: make the job due now, as the clock would
            daemon.job.next_run = datetime.datetime.now()
            wait_for(lambda: (os.path.isdir(folder) and len(set(os.listdir(folder))
                                                           - set(seen)) >= 1
                              and daemon.job.next_run > datetime.datetime.now()),
                     "a scheduled backup")
            seen = sorted(os.listdir(folder))
            store.collection("things").insert({"n": 100 + round_})
        assert len(seen) == 2 and all(archive.SCHEDULED.match(n) for n in seen)
        assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
        newest = archive.read(os.path.join(folder, seen[-1]), 1)
        assert newest.manifest["kinds"]["things"] == 13     # the 4th ran after 3 inserts
    finally:
        daemon.stop()
        daemon.store.close()
        store.close()


def test_a_failed_scheduled_backup_is_logged_and_the_daemon_goes_on(tmp_path, caplog):
    Store(str(tmp_path / "state")).close()
    blocker = tmp_path / "backups"
    blocker.write_text("a file where the folder should be")
    daemon = Backup(settings_for(tmp_path, backup_schedule="daily at 03:00"))
    daemon.back_up()
    assert "scheduled backup failed" in caplog.text
    daemon.store.close()


def test_without_a_schedule_the_daemon_schedules_nothing(tmp_path):
    daemon = Backup(settings_for(tmp_path)).start()
    try:
        # only the base's own tick: no backup job
        assert [job.unit for job in daemon._scheduler.jobs] == ["seconds"]
    finally:
        daemon.stop()
        daemon.store.close()


def test_the_daemon_is_started_by_up_and_the_image_runs_it_from_a_timer():
    """`appliance up` runs the daemon; the image runs a oneshot of it from the timer that
    first boot writes (tests/firstboot/test_backup_timer.py), never an idle process."""
    assert "backup" in DAEMONS
    with open(os.path.join(ROOT, "systemd", "appliance-backup.service")) as f:
        unit = f.read()
    assert "-m daemons.backup --once\n" in unit and "Type=oneshot\n" in unit
    assert "[Install]" not in unit
    with open(os.path.join(ROOT, "systemd", "appliance.target")) as f:
        assert "appliance-backup.service" not in f.read()


@pytest.mark.parametrize("text, trigger", [
    ("daily at 03:00", "OnCalendar=*-*-* 03:00:00\n"),
    ("Daily  at 23:59", "OnCalendar=*-*-* 23:59:00\n"),
    ("every 1 minute", "OnActiveSec=1min\nOnUnitActiveSec=1min\n"),
    ("every 6 hours", "OnActiveSec=6h\nOnUnitActiveSec=6h\n"),
])
def test_the_timer_runs_at_the_times_of_the_schedule(text, trigger):
    unit = timer_unit(text)
    assert f"[Timer]\n{trigger}AccuracySec=1s\nUnit=appliance-backup.service\n" in unit


def test_a_bad_schedule_makes_no_timer():
    with pytest.raises(ScheduleError):
        timer_unit("weekly")


def run_once(tmp_path, **settings):
    """`python -m daemons.backup --once` as the timer's unit runs it."""
    env = clean_environ(APPLIANCE_STATE_DIR=str(tmp_path / "state"),
                        APPLIANCE_BACKUP_DIR=str(tmp_path / "backups"),
                        **{f"APPLIANCE_{k.upper()}": v for k, v in settings.items()})
    return subprocess.run([sys.executable, "-P", "-m", "daemons.backup", "--once"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_once_takes_one_backup_and_prunes(tmp_path):
    store = Store(str(tmp_path / "state"))
    store.collection("things").insert_many([{"n": i} for i in range(3)])
    store.close()
    for _ in range(3):
        done = run_once(tmp_path, backup_schedule="every 1 hour", backup_keep="2")
        assert done.returncode == 0, done.stderr
    names = sorted(os.listdir(tmp_path / "backups"))
    assert len(names) == 2 and all(archive.SCHEDULED.match(n) for n in names)
    assert archive.read(str(tmp_path / "backups" / names[-1]), 1).manifest["kinds"] == {
        "things": 3}


def test_once_fails_visibly_and_does_nothing_without_a_schedule(tmp_path):
    Store(str(tmp_path / "state")).close()
    (tmp_path / "backups").write_text("a file where the folder should be")
    failed = run_once(tmp_path, backup_schedule="daily at 03:00")
    assert failed.returncode == 1 and "scheduled backup failed" in failed.stderr
    (tmp_path / "backups").unlink()
    idle = run_once(tmp_path)
    assert idle.returncode == 0 and "no backup_schedule" in idle.stderr
    assert not (tmp_path / "backups").exists()
    bad = subprocess.run([sys.executable, "-P", "-m", "daemons.backup", "--twice"], cwd=ROOT,
                         env=clean_environ(), capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "usage" in bad.stderr
