"""The daemons started on first use (daemons.ON_DEMAND, docs/on-demand-daemons.md): at
every boot, first boot starts their path units (systemd/appliance-<name>.path), each of
which starts its daemon at the first write to one of its kinds, and starts the daemons
whose kinds already hold work.

Nothing but first boot writes the state before its mark lets the API serve (the daemons'
units are ordered after first boot), so: the check for work runs after first boot's last
write, the path units watch from before the mark, and a write is either seen by the check
or by a path unit. The path units start only once the lock files they watch exist and are
the appliance user's: their creation and chown would otherwise look like writes.

Once started, a daemon stops again when idle, asleep on its kinds (state/wake.py): its
path unit's `PathExists=<state>/.wake/appliance-<name>` starts it at the mark a write
leaves. First boot empties `.sleep/` and `.wake/` before its first write (run()), so a
mark of the last boot starts nothing. A daemon that stops with a timer of its own also
leaves a timed entry in `.sleep/.at/`; `appliance-wake.path` (WAKE_PATH_UNIT), started here
with the others once that folder was emptied, wakes it when the time passed.
"""

import logging
import subprocess

from appliance.capability import load
from daemons import IS_WORK, ON_DEMAND

log = logging.getLogger("appliance.firstboot")


# wakes the daemons asleep with a timer (systemd/appliance-wake.path, state/wake.py)
WAKE_PATH_UNIT = "appliance-wake.path"


def unit_of(name, suffix="service"):
    return f"appliance-{name}.{suffix}"


def prepare(store):
    """Open every watched kind, which makes its lock file (state/lock.py)."""
    for kinds in ON_DEMAND.values():
        for kind in kinds:
            store.collection(kind)


def wanted(store):
    """The on-demand daemons that have work now, in ON_DEMAND's order."""
    names = []
    for name, kinds in ON_DEMAND.items():
        is_work = load(IS_WORK[name]) if name in IS_WORK else (lambda record: True)
        if any(is_work(record) for kind in kinds for record in store.collection(kind).records()):
            names.append(name)
    return names


def watch(systemctl):
    """Start every path unit (and the timed sleepers' waker) and wait until they watch.
    False when that failed: then the caller starts every on-demand daemon, so that no work
    waits for a write nobody sees."""
    try:
        systemctl("start", *[unit_of(name, "path") for name in ON_DEMAND], WAKE_PATH_UNIT)
        return True
    except (OSError, subprocess.SubprocessError):
        log.exception("could not start the path units of the daemons started on first use; "
                      "starting every one of them now")
        return False


def start(names, systemctl):
    """Ask systemd to start these on-demand daemons, without waiting: their units are
    ordered after first boot, which is still running."""
    for name in names:
        try:
            systemctl("--no-block", "start", unit_of(name))
        except (OSError, subprocess.SubprocessError):
            log.exception("could not start %s", unit_of(name))
    log.info("daemons started on first use: %s", ", ".join(names) or "none has work yet")
