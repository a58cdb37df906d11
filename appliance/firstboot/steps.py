"""How long first boot's steps took, said in one line at its end. First boot is on the
boot's critical chain to a healthy API (docs/boot.md): the API serves only after its mark,
so this line is where a slow boot's time is found, in every boot's journal."""

import os
import time

from appliance.processes import start_time


def process_age():
    """Seconds since this process started: the interpreter's start and the imports that
    ran before any step (its start time is in clock ticks since boot)."""
    return (time.clock_gettime(time.CLOCK_BOOTTIME)
            - start_time(os.getpid()) / os.sysconf("SC_CLK_TCK"))


class Steps:
    """Each step's seconds, from the last step's end; the first, `code`, is the process's
    age when the steps begin."""

    def __init__(self):
        self.seconds = [("code", process_age())]
        self._last = time.monotonic()

    def done(self, name):
        now = time.monotonic()
        self.seconds.append((name, now - self._last))
        self._last = now

    def line(self):
        total = sum(s for _, s in self.seconds)
        return (f"first boot took {total:.1f} s: "
                + ", ".join(f"{name} {s:.1f}" for name, s in self.seconds))
