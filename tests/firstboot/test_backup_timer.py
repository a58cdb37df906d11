"""First boot writes the backup timer from backup_schedule (appliance/firstboot/
backup_timer.py): into a temporary /run/systemd/system here, with systemctl recorded."""

import os

from appliance import config
from appliance.firstboot import backup_timer


def settings(tmp_path, **extra):
    return config.load(environ={}, overrides={"state_dir": str(tmp_path / "state"),
                                              "backup_dir": str(tmp_path / "b"), **extra})


def test_a_schedule_makes_the_timer_once_and_its_removal_stops_it(tmp_path):
    runtime = str(tmp_path / "run/systemd/system")
    calls = []
    systemctl = lambda *args: calls.append(args)       # noqa: E731
    assert backup_timer.apply(settings(tmp_path, backup_schedule="every 30 minutes"),
                              runtime, systemctl)
    path = os.path.join(runtime, "appliance-backup.timer")
    with open(path) as f:
        assert "OnUnitActiveSec=30min\n" in f.read()
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert calls == [("daemon-reload",), ("restart", "--no-block", "appliance-backup.timer")]
    # the next boot with the same schedule: nothing to reload
    calls.clear()
    assert not backup_timer.apply(settings(tmp_path, backup_schedule="every 30 minutes"),
                                  runtime, systemctl)
    assert calls == []
    # another schedule: rewritten and restarted
    assert backup_timer.apply(settings(tmp_path, backup_schedule="daily at 02:30"),
                              runtime, systemctl)
    with open(path) as f:
        assert "OnCalendar=*-*-* 02:30:00\n" in f.read()
    calls.clear()
    assert backup_timer.apply(settings(tmp_path), runtime, systemctl)
    assert not os.path.exists(path)
    assert calls == [("daemon-reload",), ("stop", "appliance-backup.timer")]
    assert os.listdir(runtime) == []


def test_no_schedule_touches_nothing(tmp_path):
    calls = []
    runtime = str(tmp_path / "run/systemd/system")
    assert not backup_timer.apply(settings(tmp_path), runtime, lambda *a: calls.append(a))
    assert calls == [] and not os.path.exists(runtime)
