"""A stand-in for systemctl in the sqldb driver's systemd tests: a MOCK, because no systemd
runs here (the container's pid 1 is not systemd, so the real systemctl cannot start a
unit). It runs what the unit file says, as systemd would for the few verbs the driver
uses, so the unit's own ExecStart/ExecStop (real pg_ctl, as the unit's User) are what
start and stop PostgreSQL:

    python fake_systemctl.py <node root> daemon-reload | enable --now U | start U |
                             stop U | disable --now U | restart U

Each call is appended to <node root>/systemctl.calls.
"""

import os
import shlex
import subprocess
import sys


def unit(root, name):
    fields = {}
    with open(os.path.join(root, "etc/systemd/system", name)) as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if sep:
                fields[key] = value
    return fields


def run_as(fields, key):
    argv = shlex.split(fields[key])
    user = fields.get("User", "root")
    done = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                           "--", "env", "-C", "/", *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(done.stdout)
    return done.returncode


def main(root, *args):
    with open(os.path.join(root, "systemctl.calls"), "a") as f:
        f.write(" ".join(args) + "\n")
    verb, names = args[0], [a for a in args[1:] if not a.startswith("-")]
    if verb == "daemon-reload":
        return 0
    now = "--now" in args
    for name in names:
        try:
            fields = unit(root, name)
        except FileNotFoundError:
            print(f"Unit {name} not found.")
            return 5 if verb != "disable" else 0
        if verb in ("start", "restart") or (verb == "enable" and now):
            if verb == "restart":
                run_as(fields, "ExecStop")
            code = run_as(fields, "ExecStart")
            if code:
                return code
        elif verb == "stop" or (verb == "disable" and now):
            run_as(fields, "ExecStop")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
