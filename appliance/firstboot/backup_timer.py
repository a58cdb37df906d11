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
from appliance.agent.host import Host
from appliance.files import EVERYWHERE
from appliance.backup_schedule import timer_unit

log = logging.getLogger("appliance.firstboot")

TIMER = "appliance-backup.timer"


def apply(settings, directory, systemctl):
    """Make `directory`/TIMER match `backup_schedule` (None: no file); on a change reload
    systemd (the node toolbox's ensure_unit/remove_unit, on the appliance's own node) and
    (re)start or stop the timer. `systemctl(*args)` runs systemctl (a fake in tests).
    Returns True on a change."""
    schedule = settings["backup_schedule"]
    directory = os.path.abspath(directory)
    host = Host(root="/", allowed_roots=EVERYWHERE, state_dir=None, unit_dir=directory)
    if schedule is None:
        changed = host.remove_unit(TIMER, systemctl=systemctl)
    else:
        changed = host.ensure_unit(TIMER, timer_unit(schedule), systemctl=systemctl)
    if not changed:
        return False
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
