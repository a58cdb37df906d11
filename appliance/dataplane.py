"""The data plane on this box: `<state-dir>/data-plane/`, where delivered values land.

Directories 0700 and files 0600 (root only). A file is replaced atomically (temp file,
fsync, rename, fsync of the directory), so a reader sees the old value or the new one.
"""

import os

ROOT = "data-plane"


class DataPlane:
    def __init__(self, state_dir):
        self.root = os.path.join(state_dir, ROOT)
        self._tighten_existing()

    def _tighten_existing(self):
        """Directories left 0755 by an older version (os.makedirs gives the levels it
        creates on the way 0777 minus the umask, whatever `mode` says) are closed at start."""
        for directory, _, _ in os.walk(self.root):
            os.chmod(directory, 0o700)

    def _make_dirs(self, directory):
        """Every level from the data plane's root down to `directory`, each one 0700."""
        path = os.path.dirname(self.root)
        for part in os.path.relpath(directory, path).split(os.sep):
            path = os.path.join(path, part)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def read(self, *parts):
        try:
            with open(self.path(*parts), "rb") as f:
                return f.read().decode()
        except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
            return None

    def write(self, parts, text):
        target = self.path(*parts)
        directory = os.path.dirname(target)
        self._make_dirs(directory)
        tmp = os.path.join(directory, f".{os.path.basename(target)}.{os.urandom(4).hex()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, target)
        except OSError:
            os.unlink(tmp)
            raise
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def remove(self, *parts):
        """True when a file was there."""
        try:
            os.unlink(self.path(*parts))
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def names(self, *parts):
        try:
            return [n for n in os.listdir(self.path(*parts)) if not n.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []
