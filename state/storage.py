"""TinyDB storage that writes atomically (the base files, journal headers, private files).

The file is an ordinary TinyDB database (`{"<table>": {"<doc_id>": {...}}}`), so stock
TinyDB can open it. Unlike `JSONStorage` it never rewrites the file in place: it writes a
temporary file, fsyncs it, renames it over the old one and fsyncs the directory, so a crash
at any instant leaves either the old or the new content, never a torn file.
"""

import os

import orjson
from tinydb.storages import Storage


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicJSONStorage(Storage):
    """Storage of one state file. Callers hold the kind's lock around `write`."""

    TEMP_SUFFIX = ".tmp"

    def __init__(self, path, mode=0o600):
        self.path = path
        self.mode = mode
        self.directory = os.path.dirname(path) or "."

    def stat_key(self):
        """What changes whenever the file is replaced; None when there is no file."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def read(self):
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        if not raw:
            return None
        return orjson.loads(raw)

    def read_sized(self):
        """The content and its size in bytes; (None, 0) when there is no file."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None, 0
        return (orjson.loads(raw) if raw else None), len(raw)

    def write(self, data):
        self.write_bytes(orjson.dumps(data))

    def write_bytes(self, payload):
        # os.urandom, not secrets: secrets imports hmac and so OpenSSL's libcrypto, ~3 MB
        # of RSS in every daemon that only needs a unique name
        base = os.path.basename(self.path)
        tmp = os.path.join(self.directory, f".{base}.{os.urandom(6).hex()}{self.TEMP_SUFFIX}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.mode)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, self.path)
        fsync_dir(self.directory)

    def temp_files(self):
        """Names of this file's temp files: a live writer's, or left by one that died."""
        prefix = f".{os.path.basename(self.path)}."
        return [name for name in os.listdir(self.directory)
                if name.startswith(prefix) and name.endswith(self.TEMP_SUFFIX)]

    def remove_stale_temp_files(self):
        """Temp files left by a writer that died. Call only while holding the lock."""
        for name in self.temp_files():
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass
