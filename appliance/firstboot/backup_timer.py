"""The backup timer: appliance-backup.timer in /run/systemd/system, written at every boot
from `backup_schedule` (none without one), so that no idle daemon waits in memory for the
next backup (docs/backup.md, "Scheduled backups" in the image). /run is rebuilt at every
boot, so a schedule removed from the config is gone at the next boot; to apply a change
at once: `/opt/appliance/venv/bin/python -P -m appliance.firstboot.backup_timer` as root.
"""

import logging
import os
import subprocess
import sys

from appliance import config
from appliance.backup_schedule import timer_unit

log = logging.getLogger("appliance.firstboot")

TIMER = "appliance-backup.timer"


def write(directory, schedule):
    """Make `directory`/TIMER match `schedule` (None: no file). True when it changed."""
    path = os.path.join(directory, TIMER)
    text = None
    if schedule is not None:
        text = timer_unit(schedule)
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        old = None
    if old == text:
        return False
    if text is None:
        os.remove(path)
        return True
    os.makedirs(directory, exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.chmod(path + ".tmp", 0o644)
    os.replace(path + ".tmp", path)
    return True


def apply(settings, directory, systemctl):
    """Write the timer; on a change reload systemd and (re)start or stop the timer.
    `systemctl(*args)` runs systemctl (a fake in tests). Returns True on a change."""
    schedule = settings["backup_schedule"]
    if not write(directory, schedule):
        return False
    systemctl("daemon-reload")
    if schedule is None:
        systemctl("stop", TIMER)
        log.info("no backup_schedule: no scheduled backups")
    else:
        # --no-block: first boot is itself a job of the boot transaction
        systemctl("restart", "--no-block", TIMER)
        log.info("scheduled backups %s into %s, keeping %d", schedule,
                 settings["backup_dir"], settings["backup_keep"])
    return True


def systemctl(*args):
    subprocess.run(["systemctl", *args], check=True, timeout=120)


def main():
    apply(config.load(), "/run/systemd/system", systemctl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
