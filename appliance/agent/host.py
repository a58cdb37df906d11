"""What a driver may use of the node it runs on: the node toolbox (docs/node-toolbox.md,
docs/agent.md "Drivers").

A driver writes a file with `write_file` (appliance/files.py: the walk through the allowed
roots, O_NOFOLLOW, fsync and rename, and False when nothing changed), reads one with
`read_file`, installs a systemd unit with `ensure_unit` (daemon-reload only when it
changed), runs a command with `run`, and spaces its retries with `backoff`. Any other path
it touches goes through `Host.path`: absolute, no `..`, under one of the allowed roots, and
not leaving them through a symlink. `root` is a prefix directory ("/" on a real node; a
test's HW "node" gets its own directory, so several agents share a host).
"""

import logging
import os
import subprocess

from appliance import files
from appliance.backoff import Backoff
from appliance.files import PathRefused

UNIT_DIR = "/etc/systemd/system"

DEFAULT_ALLOWED_ROOTS = ("/etc", "/opt", "/srv", "/var/lib", "/home", "/root", "/usr/local")
OUTPUT_LIMIT = 64 * 1024


class Host:
    unit_dir = UNIT_DIR

    def __init__(self, *, root="/", allowed_roots=DEFAULT_ALLOWED_ROOTS, state_dir,
                 api=None, node=None, agent=None, log=None, systemctl=("systemctl",),
                 settings=None, unit_dir=UNIT_DIR):
        self.root = os.path.realpath(root)
        self.allowed_roots = [os.path.normpath(r) for r in allowed_roots]
        for r in self.allowed_roots:
            if not os.path.isabs(r):
                raise ValueError(f"allowed root {r!r} is not an absolute path")
        self.state_dir = state_dir
        self.api = api
        self.node = node
        self.agent = agent
        self.log = log or logging.getLogger("appliance.agent.host")
        # the systemctl command line; a host test may put a documented fake in its place
        self.systemctl_command = list(systemctl)
        # the agent's settings, for drivers that take one (agent_lb_listen)
        self.settings = dict(settings or {})
        # where ensure_unit writes units (first boot's runtime units: /run/systemd/system)
        self.unit_dir = unit_dir

    # ---- files -----------------------------------------------------------------------

    def write_file(self, path, data, mode=0o644, owner=None, *, private=None):
        """Make the node's file `path` hold `data` with `mode` and `owner` ((uid, gid),
        None: the agent's); True when it changed (appliance/files.write_file)."""
        return files.write_file(path, data, mode, owner, root=self.root,
                                allowed_roots=self.allowed_roots, private=private)

    def read_file(self, path):
        """Bytes of the node's regular file `path`, None when absent."""
        return files.read_file(path, root=self.root, allowed_roots=self.allowed_roots)

    def stat_file(self, path):
        """os.stat of the node's `path`, its symlink not followed."""
        return files.stat_file(path, root=self.root, allowed_roots=self.allowed_roots)

    def remove_file(self, path):
        """True when the node's file `path` was there and is now gone."""
        return files.remove_file(path, root=self.root, allowed_roots=self.allowed_roots)

    def write_state(self, name, data, mode=0o600, sync=True):
        """A file of the agent's own, in its state directory (not a node path: the state
        directory is the agent's, outside any root prefix). sync=False: see
        files.write_file."""
        state_dir = os.path.abspath(self.state_dir)
        return files.write_file(os.path.join(state_dir, name), data, mode,
                                private=(state_dir, None, 0o700), sync=sync)

    def ensure_unit(self, name, text, *, dropins=(), systemctl=None):
        """Install the systemd unit `name` with `text`, and its drop-ins (pairs of a file
        name in `name`.d/ and its text); True when any of them changed, and then systemd
        has re-read its units: one daemon-reload, through `systemctl` when given (a
        driver's own, which raises on a failure) else Host.systemctl."""
        changed = self.write_file(f"{self.unit_dir}/{name}", text, 0o644)
        for file, dropin in dropins:
            changed = self.write_file(f"{self.unit_dir}/{name}.d/{file}", dropin, 0o644) \
                or changed
        if changed:
            (systemctl or self.systemctl)("daemon-reload")
        return changed

    def remove_unit(self, name, *, systemctl=None):
        """Drop the unit file `name`; True, and systemd has re-read its units, when it was
        there."""
        removed = self.remove_file(f"{self.unit_dir}/{name}")
        if removed:
            (systemctl or self.systemctl)("daemon-reload")
        return removed

    def backoff(self, first, cap):
        """A per-key exponential back-off (appliance/backoff.py)."""
        return Backoff(first, cap)

    def path(self, p):
        """The real path of the node's absolute path `p`, or PathRefused saying why."""
        if not isinstance(p, str) or not p.startswith("/"):
            raise PathRefused(f"{p!r} is not an absolute path")
        if "\x00" in p or ".." in p.split("/"):
            raise PathRefused(f"{p!r} contains '..' or a NUL byte")
        inside = os.path.normpath(p)
        allowed = next((r for r in self.allowed_roots if files.inside(inside, [r])), None)
        if allowed is None:
            raise PathRefused(f"{p} is outside the allowed roots "
                              f"({', '.join(self.allowed_roots)})")
        real = self.root + inside if self.root != "/" else inside
        # a symlink anywhere on the way (the file itself included) may point out of the
        # allowed root: what it resolves to must stay inside it
        base = self.root + allowed if self.root != "/" else allowed
        resolved = os.path.realpath(real)
        if not files.inside(resolved, [os.path.realpath(base)]):
            raise PathRefused(f"{p} leads out of {allowed} through a symlink")
        return real

    def node_path(self, real):
        """The node's path of a real path under the root prefix (Host.path's inverse)."""
        if self.root == "/":
            return real
        if not (real == self.root or real.startswith(self.root + "/")):
            raise PathRefused(f"{real} is not under this node's root {self.root}")
        return real[len(self.root):] or "/"

    # ---- commands --------------------------------------------------------------------

    def run(self, argv, timeout=60, input=None):
        """(exit code, the tail of stdout and stderr together). A command that cannot
        start is code 127, one that runs out of time 124 (as timeout(1) says)."""
        try:
            done = subprocess.run(argv, input=input, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=timeout,
                                  text=True, errors="replace")
        except FileNotFoundError as e:
            return 127, str(e)
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            out = out.decode(errors="replace") if isinstance(out, bytes) else out
            return 124, (out + f"\n(timed out after {timeout} s)")[-OUTPUT_LIMIT:]
        return done.returncode, done.stdout[-OUTPUT_LIMIT:]

    def systemctl(self, *args):
        return self.run(self.systemctl_command + list(args))
