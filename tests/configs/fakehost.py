"""A stand-in for `appliance.agent.host.Host` (the contract in docs/configs.md): a root
prefix directory, the allowed roots, and commands run for real on this machine. The node
toolbox (write_file, read_file...) is the real Host's."""

import os
import subprocess

from appliance.agent.host import Host

ALLOWED = ["/etc", "/opt", "/srv", "/var/lib", "/home", "/root", "/usr/local"]


class FakeHost(Host):
    def __init__(self, root, allowed_roots=ALLOWED):
        self.root = str(root)
        self.allowed_roots = list(allowed_roots)
        self.ran = []

    def path(self, p):
        return os.path.join(self.root, p.lstrip("/"))

    def run(self, argv, timeout=60, input=None):
        self.ran.append(argv)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              input=input)
        return done.returncode, done.stdout + done.stderr


def write_passwd(root, users=(("root", 0, 0, "/root"), ("app", 1234, 1234, "/home/app"))):
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc", "passwd"), "w") as f:
        for name, uid, gid, home in users:
            f.write(f"{name}:x:{uid}:{gid}::{home}:/bin/sh\n")
    with open(os.path.join(root, "etc", "group"), "w") as f:
        for name, uid, gid, home in users:
            f.write(f"{name}:x:{gid}:\n")
        f.write("staff:x:50:\n")
