"""A rollback point of the state directory: a copy of every data file, taken before a
change of the whole state (a migration, a restore) and put back if the change fails.

`.rollback.tmp/` is filled (each copy fsynced, then the list of names) and only then
renamed `.rollback/`: the rename is the moment from which the copy counts. While
`.rollback/` exists the change is under way, so a process that dies inside it leaves the
directory, and the next start (Store.recover) puts the copy back. Dropping it goes through
a rename to `.rollback.done/` first, so a half-deleted copy is never taken for a whole one.
Copies, not hard links: journals are appended in place.
"""

import os
import shutil

import orjson

from .storage import AtomicJSONStorage, fsync_dir

POINT = ".rollback"
FILLING = ".rollback.tmp"
DROPPED = ".rollback.done"
LIST = "files.json"
COPIES = "files"


def pending(directory):
    return os.path.isdir(os.path.join(directory, POINT))


def _copy(source, target):
    """Copy a file's bytes and fsync it (mode 0600)."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(source, "rb") as src:
            while chunk := src.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def begin(directory, names):
    """Copy the data files `names` (top-level file names) into a new rollback point."""
    filling = os.path.join(directory, FILLING)
    shutil.rmtree(filling, ignore_errors=True)
    os.mkdir(filling, 0o700)
    copies = os.path.join(filling, COPIES)
    os.mkdir(copies, 0o700)
    for name in names:
        _copy(os.path.join(directory, name), os.path.join(copies, name))
    fsync_dir(copies)
    AtomicJSONStorage(os.path.join(filling, LIST)).write_bytes(orjson.dumps(sorted(names)))
    os.rename(filling, os.path.join(directory, POINT))
    fsync_dir(directory)


def restore(directory, current):
    """Put every copied file back (each atomically) and remove the data files of
    `current` that the copy does not hold (made by the change). Safe to run again."""
    point = os.path.join(directory, POINT)
    with open(os.path.join(point, LIST), "rb") as f:
        names = orjson.loads(f.read())
    for name in names:
        with open(os.path.join(point, COPIES, name), "rb") as f:
            AtomicJSONStorage(os.path.join(directory, name)).write_bytes(f.read())
    for name in set(current) - set(names):
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    fsync_dir(directory)


def discard(directory):
    """Drop the rollback point (the change is complete), and any half-made one."""
    point = os.path.join(directory, POINT)
    dropped = os.path.join(directory, DROPPED)
    if os.path.isdir(point):
        shutil.rmtree(dropped, ignore_errors=True)
        os.rename(point, dropped)
        fsync_dir(directory)
    for leftover in (dropped, os.path.join(directory, FILLING)):
        shutil.rmtree(leftover, ignore_errors=True)
