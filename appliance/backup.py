"""Backups of the appliance: what `appliance backup` / `restore` and the backup daemon
share. The files themselves are state/backup.py's business (docs/backup.md).

Schedules are written in the config file as `backup_schedule`:
- `daily at HH:MM` (the box's local time; the image runs in UTC),
- `every N minutes` or `every N hours` (N from 1).
"""

import re

from appliance import __version__
from appliance.migrations import latest
from state import backup as archive

_DAILY = re.compile(r"^daily at ([01]\d|2[0-3]):([0-5]\d)$")
_EVERY = re.compile(r"^every ([1-9]\d{0,5}) (minute|hour)s?$")
SCHEDULE_HELP = "'daily at HH:MM', 'every N minutes' or 'every N hours'"


class ScheduleError(ValueError):
    pass


def parse_schedule(text):
    """A function that registers the schedule on a `schedule.Scheduler` and returns its
    job (to which the caller adds .do(...)); ScheduleError when `text` is none of the
    forms above."""
    text = " ".join(str(text).split()).lower()
    daily = _DAILY.match(text)
    if daily:
        at = f"{daily.group(1)}:{daily.group(2)}"
        return lambda scheduler: scheduler.every().day.at(at)
    every = _EVERY.match(text)
    if every:
        count, unit = int(every.group(1)), every.group(2) + "s"
        return lambda scheduler: getattr(scheduler.every(count), unit)
    raise ScheduleError(f"backup_schedule: expected {SCHEDULE_HELP}, not {text!r}")


def take(settings, path, progress=None):
    """Back the state up to `path`; returns the manifest."""
    return archive.create(settings["state_dir"], path, {"appliance_version": __version__},
                          progress or (lambda *_: None))


def scheduled(settings):
    """A scheduled backup with its pruning: (path, manifest, names removed)."""
    return archive.scheduled(settings["state_dir"], settings["backup_dir"],
                             settings["backup_keep"], {"appliance_version": __version__})


def check(path, progress=None):
    """Read and validate a backup for this code (BackupError says why not)."""
    return archive.read(path, latest(), progress or (lambda *_: None))


def restore(settings, backup, progress=None):
    archive.restore(settings["state_dir"], backup, progress or (lambda *_: None))
