"""Backup daemon: scheduled backups of the state with retention (docs/backup.md).

Settings `backup_schedule`, `backup_dir` and `backup_keep` (appliance/config.py): at each
time of the schedule, one backup into backup_dir, then the oldest removed down to
backup_keep. Without a schedule it idles. It watches no kind: a backup is taken under the
store's locks, whatever changes.

`appliance up` runs it as a daemon, which stops when idle while there is no schedule
(docs/on-demand-daemons.md). The image runs no daemon for it (an idle interpreter is
~20 MB): `--once` takes one scheduled backup and exits, which appliance-backup.service
runs from the timer that first boot writes from backup_schedule (docs/backup.md).
"""

import sys

from appliance import backup, config, logs
from appliance.backup_schedule import parse_schedule
from daemons.base import STAY, Daemon, run


class Backup(Daemon):
    name = "backup"
    kinds = ()
    tick_seconds = 3600.0       # nothing to reconcile: the tick only keeps the base going

    def schedule_jobs(self, scheduler):
        text = self.settings["backup_schedule"]
        if text is None:
            self.log.info("no backup_schedule set: no scheduled backups")
            return
        self.job = parse_schedule(text)(scheduler).do(self.back_up)
        self.log.info("backups %s into %s, keeping %d", text, self.settings["backup_dir"],
                      self.settings["backup_keep"])

    def idle_wake_at(self):
        # `appliance up` stops it when idle (docs/on-demand-daemons.md): only without a
        # schedule, as a restarted scheduler counts its next time from its own start
        return STAY if self.settings["backup_schedule"] is not None else None

    def back_up(self):
        try:
            path, manifest, removed = backup.scheduled(self.settings)
        except Exception:
            # a full disk or a missing folder: logged, and tried again at the next time
            self.log.exception("scheduled backup failed")
            return False
        self.log.info("backup %s: %d kinds, %d records; removed %d old: %s", path,
                      len(manifest["kinds"]), sum(manifest["kinds"].values()), len(removed),
                      ", ".join(removed) or "none")
        return True


def once():
    """One scheduled backup (the timer's service): exit 1 when it failed, so that the
    unit shows failed with the reason in its journal."""
    try:
        settings = config.load()
    except config.ConfigError as e:
        print(f"backup: {e}", file=sys.stderr)
        return 2
    logs.setup(Backup.name, str(settings["log_level"]).upper())
    if settings["backup_schedule"] is None:
        print("backup: no backup_schedule set: nothing to do", file=sys.stderr)
        return 0
    return 0 if Backup(settings).back_up() else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--once"]:
        return once()
    if argv:
        print("usage: python -m daemons.backup [--once]", file=sys.stderr)
        return 2
    return run(Backup)


if __name__ == "__main__":
    sys.exit(main())
