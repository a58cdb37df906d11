"""Whether a process of this machine still exists, asked once for everyone who must tell a
live owner from a dead one by its pid (the metric files of a process, a KVM probe's
domain)."""

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
