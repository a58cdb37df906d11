"""pytest's tmp_path and tmp_path_factory on a tmpfs (/dev/shm), for the test directories
whose conftest.py takes `tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()`.

Why: the state store fsyncs every file it replaces and its directory (state/storage.py),
and so does every daemon the tests start over the same state directory. On this machine's
disk an fsync costs 10 to 30 ms (more while images are built beside the tests), which made
the fsyncs a large part of the time of every test that writes. The store's code runs
unchanged here (it still writes, fsyncs and renames); only the kernel's flush to a disk is
free on tmpfs, and what that flush buys, durability across a power loss, is what no test
can see.

tests/state keeps the default (/tmp): the store's own tests, some of which race a reader
against writers at the pace of a disk's writes (test_feed.py's cursor across segments
falls out of the feed's window when the writes cost nothing); tests/audit too (its
test of a lost entry makes a segment immutable with chattr, which tmpfs does not
enforce). tests/image and
tests/compute keep it too: their disk images are gigabytes that a RAM disk should not
hold, and QEMU's cache modes may want O_DIRECT, which tmpfs lacks.

Each directory's fixture makes a directory of its own, /dev/shm/appliance-tests-<pid>-*,
removed at the end of the run unless a test failed (then kept for a look, and removed by
the first later run that finds its process gone). Without a writable /dev/shm the default
factory is used.
"""

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

TMPFS = "/dev/shm"
PREFIX = "appliance-tests-"


def _usable():
    return os.path.isdir(TMPFS) and os.access(TMPFS, os.W_OK | os.X_OK)


def _remove_left_by_ended_runs():
    for entry in os.listdir(TMPFS):
        match = re.match(rf"{PREFIX}(\d+)-", entry)
        if match is None:
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(TMPFS, entry), ignore_errors=True)
        except PermissionError:
            pass        # another user's run, alive


def tmp_path_factory_on_tmpfs():
    """A session fixture named tmp_path_factory (tmp_path and tmpdir follow it) whose
    directories are on the tmpfs."""

    @pytest.fixture(scope="session", name="tmp_path_factory")
    def factory(request, tmp_path_factory):
        if not _usable():
            yield tmp_path_factory
            return
        _remove_left_by_ended_runs()
        base = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=TMPFS)
        yield pytest.TempPathFactory(
            Path(base) / "t", retention_count=0, retention_policy="all",
            trace=request.config.trace.get("tmpdir"), _ispytest=True)
        if not request.session.testsfailed:
            shutil.rmtree(base, ignore_errors=True)

    return factory
