"""The backup schedule, `backup_schedule` in the config file (docs/backup.md): its forms,
read once here for the three that use it: appliance/config.py checks it when the settings
load, the backup daemon runs it, and first boot writes it as a systemd timer. A leaf
(stdlib only), so that the settings check loads none of the backup archive code.

The forms:
- `daily at HH:MM` (the box's local time; the image runs in UTC),
- `every N minutes` or `every N hours` (N from 1).
"""

import re

_DAILY = re.compile(r"^daily at ([01]\d|2[0-3]):([0-5]\d)\Z")
_EVERY = re.compile(r"^every ([1-9]\d{0,5}) (minute|hour)s?\Z")
SCHEDULE_HELP = "'daily at HH:MM', 'every N minutes' or 'every N hours'"


class ScheduleError(ValueError):
    pass


def _schedule(text):
    """("daily", "HH:MM") or ("every", N, "minute"|"hour"); ScheduleError otherwise."""
    text = " ".join(str(text).split()).lower()
    daily = _DAILY.match(text)
    if daily:
        return "daily", f"{daily.group(1)}:{daily.group(2)}"
    every = _EVERY.match(text)
    if every:
        return "every", int(every.group(1)), every.group(2)
    raise ScheduleError(f"backup_schedule: expected {SCHEDULE_HELP}, not {text!r}")


def parse_schedule(text):
    """A function that registers the schedule on a `schedule.Scheduler` and returns its
    job (to which the caller adds .do(...)); ScheduleError when `text` is none of the
    forms above."""
    parsed = _schedule(text)
    if parsed[0] == "daily":
        return lambda scheduler: scheduler.every().day.at(parsed[1])
    return lambda scheduler: getattr(scheduler.every(parsed[1]), parsed[2] + "s")


def timer_unit(text, service="appliance-backup.service"):
    """The systemd timer that runs `service` (one scheduled backup, then exit) at the times
    of schedule `text`, as parse_schedule's job runs them in the daemon: daily at a wall
    clock time, or every N minutes/hours counted from the start (no catch-up of a time
    missed while the box was off, as the daemon has none). ScheduleError as there."""
    parsed = _schedule(text)
    if parsed[0] == "daily":
        trigger = f"OnCalendar=*-*-* {parsed[1]}:00\n"
    else:
        span = f"{parsed[1]}{'min' if parsed[2] == 'minute' else 'h'}"
        trigger = f"OnActiveSec={span}\nOnUnitActiveSec={span}\n"
    return ("# written at boot by appliance-firstboot from backup_schedule; docs/backup.md\n"
            "[Unit]\nDescription=Scheduled appliance backups\n\n"
            f"[Timer]\n{trigger}AccuracySec=1s\nUnit={service}\n")
