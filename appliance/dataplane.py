"""The data plane on this box: `<state-dir>/data-plane/`, where delivered values land.

Directories 0700 and files 0600 (root only). A file is replaced by the one writer,
appliance/files.write_file (temp file, fsync, rename, fsync of the directory), so a
reader sees the old value or the new one.
"""

import os

from appliance.files import write_file

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

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def read(self, *parts):
        try:
            with open(self.path(*parts), "rb") as f:
                return f.read().decode()
        except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
            return None

    def write(self, parts, text):
        """OSError when it cannot be written (a file where a folder must be...)."""
        write_file(os.path.abspath(self.path(*parts)), text, 0o600,
                   private=(os.path.abspath(self.root), None, 0o700))

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
