"""Replacing a file whole: how the node-side code (the agent's drivers, first boot) writes a
file that a reader (nginx, PostgreSQL, sshd, systemd, a user) may be reading at that moment.

Store files are not written here: the store has its own writer (state/storage.py).
"""

import os
import tempfile


def write_atomically(path, data, mode=0o600, *, owner=None, sync=True, dir_mode=0o700):
    """Replace `path` with `data` (bytes, or str written as UTF-8). A reader sees the old
    content or the new, never part of one.

    The temp file is created exclusively (O_EXCL: never through a symlink an attacker
    placed) with mode 0600, then given `mode` and `owner` ((uid, gid)) before any byte is
    written, so a key is never readable by others, not even for a moment. sync=False skips
    the fsync: a crash of the process still leaves a whole file, only a power loss may
    bring the previous version back. A missing folder is made, the file's own with
    `dir_mode` (os.makedirs)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=dir_mode, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        try:
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, *owner)
            view = memoryview(data.encode() if isinstance(data, str) else data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
