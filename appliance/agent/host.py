"""What a driver may use of the node it runs on (docs/agent.md, "Drivers").

Every path a driver touches goes through `Host.path`: absolute, no `..`, under one of the
allowed roots, and not leaving them through a symlink. `root` is a prefix directory ("/" on
a real node; a test's HW "node" gets its own directory, so several agents share a host).
"""

import logging
import os
import subprocess

DEFAULT_ALLOWED_ROOTS = ("/etc", "/opt", "/srv", "/var/lib", "/home", "/root", "/usr/local")
OUTPUT_LIMIT = 64 * 1024


class PathRefused(ValueError):
    """A path a driver may not touch; its message says why (it becomes the ERROR reason)."""


def _within(path, parent):
    return path == parent or path.startswith(parent.rstrip("/") + "/")


class Host:
    def __init__(self, *, root="/", allowed_roots=DEFAULT_ALLOWED_ROOTS, state_dir,
                 api=None, node=None, agent=None, log=None, systemctl=("systemctl",),
                 settings=None):
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

    def path(self, p):
        """The real path of the node's absolute path `p`, or PathRefused saying why."""
        if not isinstance(p, str) or not p.startswith("/"):
            raise PathRefused(f"{p!r} is not an absolute path")
        if "\x00" in p or ".." in p.split("/"):
            raise PathRefused(f"{p!r} contains '..' or a NUL byte")
        inside = os.path.normpath(p)
        allowed = next((r for r in self.allowed_roots if _within(inside, r)), None)
        if allowed is None:
            raise PathRefused(f"{p} is outside the allowed roots "
                              f"({', '.join(self.allowed_roots)})")
        real = self.root + inside if self.root != "/" else inside
        # a symlink anywhere on the way (the file itself included) may point out of the
        # allowed root: what it resolves to must stay inside it
        base = self.root + allowed if self.root != "/" else allowed
        resolved = os.path.realpath(real)
        if not _within(resolved, os.path.realpath(base)):
            raise PathRefused(f"{p} leads out of {allowed} through a symlink")
        return real

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
