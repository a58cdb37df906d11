"""Whether a process of this machine still exists, asked once for everyone who must tell a
live owner from a dead one by its pid (the metric files of a process, a KVM probe's
domain, the processes `appliance up` adopted, a daemon's recorded state)."""

import os


def alive(pid):
    """True while `pid` names a process, another user's included (signal 0 checks without
    sending anything; a process we may not signal still exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_time(pid):
    """The start time of `pid` (clock ticks since boot), None when it is gone or a zombie:
    with the pid, it names one process, never a later one that got the same pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name may hold spaces and parentheses: fields follow the last ')'
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def boot_id():
    """This boot's id (a pid and its start time name a process only within one boot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None
