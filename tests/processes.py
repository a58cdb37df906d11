"""Stopping the child processes that tests and benches start."""

import os
import signal
import subprocess


def stop(proc, timeout=10, signum=signal.SIGTERM, group=False):
    """Ask `proc` to end with `signum` (None when it was asked another way, e.g. its stdin
    closed), wait `timeout` seconds, then SIGKILL it (its whole process group when `group`:
    one started in a session of its own, with workers). Returns its exit status (negative:
    the signal that ended it); a process already ended is only reaped."""
    if proc.poll() is None:
        if signum is not None:
            try:
                proc.send_signal(signum)
            except ProcessLookupError:
                pass
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                if group:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            except ProcessLookupError:
                pass
    return proc.wait()
