"""The run's disk use, watched: a CI run ended once in "No space left on device" a
quarter of the way through, with nothing in its log to say what had filled the disk.

A thread samples the file system of the checkout (and of /tmp, where it differs) every
few seconds and remembers the highest use above the start and the test running then.
The terminal summary prints them, so every CI log says how much disk the run needed and
where; docs/testing.md, "Disk", says what the suite needs and what keeps it down.
"""

import os
import shutil
import threading
import time

SAMPLE_SECONDS = 5
GB = 1e9
RUN_NEEDS_GB = 10       # measured: docs/testing.md, "Disk"


class DiskWatch:
    def __init__(self, paths):
        devices = {}
        for p in paths:
            devices.setdefault(os.stat(p).st_dev, p)
        self.paths = list(devices.values())
        self.current = "(collection)"
        self.started = time.monotonic()
        self.start_used = self._used()
        self.start_free = self._free()
        self.peak = (0, self.current, 0.0)       # (bytes above the start, test, seconds in)
        self.low_free = self.start_free
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-watch", daemon=True)

    def _used(self):
        return sum(shutil.disk_usage(p).used for p in self.paths)

    def _free(self):
        return min(shutil.disk_usage(p).free for p in self.paths)

    def sample(self):
        above = self._used() - self.start_used
        self.low_free = min(self.low_free, self._free())
        if above > self.peak[0]:
            self.peak = (above, self.current, time.monotonic() - self.started)

    def _run(self):
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                self.sample()
            except OSError:
                pass

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(SAMPLE_SECONDS + 1)
        self.sample()

    def summary(self):
        above, test, at = self.peak
        return (f"disk: {self.start_free / GB:.1f} GB free at the start; the run used at most "
                f"{above / GB:.1f} GB more ({at / 60:.0f} min in, during {test}); "
                f"{self.low_free / GB:.1f} GB free at the lowest")


_watch = None


def pytest_sessionstart(session):
    global _watch
    _watch = DiskWatch([str(session.config.rootpath), "/tmp"]).start()


def pytest_report_header(config):
    free = min(shutil.disk_usage(p).free for p in (str(config.rootpath), "/tmp"))
    return (f"disk: {free / GB:.1f} GB free (a whole run with the image and VM tests needs "
            f"about {RUN_NEEDS_GB} GB: docs/testing.md, \"Disk\")")


def pytest_runtest_logstart(nodeid, location):
    if _watch is not None:
        _watch.current = nodeid


def pytest_terminal_summary(terminalreporter):
    if _watch is not None:
        _watch.stop()
        terminalreporter.write_line(_watch.summary())
