"""Stand-ins for what a node has and this host lacks: systemd (no systemd runs as PID 1
here; the real-systemd test runs in a TCG guest) and the agent's Host."""

import itertools
import logging
import os
import re
import subprocess

from appliance.agent.host import DEFAULT_ALLOWED_ROOTS, Host
from tests.service.test_unit import systemd_argv

_IDS = itertools.count(1)


class FakeSystemd:
    """Stands in for systemd, which cannot run on this host. It records every systemctl
    command in `calls` and keeps a tiny state machine per unit, as systemd does:
    - only units present at the last `daemon-reload` exist (a driver that forgets to
      reload gets "not found", as with a new unit on a real node);
    - a simple unit is active once started; a oneshot started with --no-block is
      `activating` for one `show` (a queued job), and the `show` after that runs its ExecStart through /bin/sh and
      records the exit code (ExecMainStatus, Result) and a new InvocationID;
    - `fail(unit)` makes a running unit fail, as a crash would;
    - `unit_died(unit)` stops the units bound to `unit` by a drop-in's BindsTo=, as
      systemd does when a unit they are bound to leaves the active state."""

    def __init__(self, root):
        self.unit_dir = os.path.join(root, "etc/systemd/system")
        self.calls = []
        self.loaded = {}
        self.units = {}

    def state(self, unit):
        return self.units.setdefault(unit, {"ActiveState": "inactive", "SubState": "dead",
                                            "Result": "success", "ExecMainStatus": "0",
                                            "InvocationID": "", "enabled": False})

    def __call__(self, *args):
        self.calls.append(args)
        verb, rest = args[0], [a for a in args[1:] if not a.startswith("--")]
        if verb == "daemon-reload":
            self.loaded = {}
            if os.path.isdir(self.unit_dir):
                for name in os.listdir(self.unit_dir):
                    if name.endswith(".service"):
                        with open(os.path.join(self.unit_dir, name)) as f:
                            self.loaded[name] = f.read()
                        dropins = os.path.join(self.unit_dir, name + ".d")
                        for conf in sorted(os.listdir(dropins)) if os.path.isdir(
                                dropins) else ():
                            with open(os.path.join(dropins, conf)) as f:
                                self.loaded[name] += "\n" + f.read()
            return 0, ""
        if verb == "show":
            props = rest[1].split(",")
            blocks = []
            for unit in rest[2:]:
                self.finish(unit)
                st = self.state(unit)
                blocks.append("\n".join(f"{p}={st.get(p, '')}" for p in props))
            return 0, "\n\n".join(blocks) + "\n"
        unit = rest[0]
        if verb == "reset-failed":
            # systemd forgets a failed unit, loaded or not (its file may be gone)
            if self.units.get(unit, {}).get("ActiveState") == "failed":
                del self.units[unit]
            return 0, ""
        if unit not in self.loaded:
            return 5, f"Failed to {verb} {unit}: Unit {unit} not found."
        st = self.state(unit)
        if verb in ("enable", "disable"):
            st["enabled"] = verb == "enable"
        elif verb == "stop":
            if st["ActiveState"] != "failed":       # stop leaves a failed unit failed
                st.update(ActiveState="inactive", SubState="dead")
        elif verb in ("start", "restart") or verb == "try-restart" and \
                st["ActiveState"] == "active":
            if verb == "start" and st["ActiveState"] in ("active", "activating"):
                return 0, ""
            st["InvocationID"] = f"{next(_IDS):032x}"
            if self.value(unit, "Type") == "oneshot":
                st.update(ActiveState="activating", SubState="start", queued=True)
                if "--no-block" not in args:
                    st.pop("queued")
                    self.finish(unit)
            else:
                st.update(ActiveState="active", SubState="running", Result="success")
        elif verb != "try-restart":
            return 1, f"unknown verb {verb}"
        return 0, ""

    def value(self, unit, key):
        found = re.findall(rf"^{key}=(.*)$", self.loaded[unit], re.M)
        return found[0] if found else None

    def finish(self, unit):
        st = self.state(unit)
        if st["ActiveState"] != "activating":
            return
        if st.pop("queued", False):
            return
        done = subprocess.run(systemd_argv(self.value(unit, "ExecStart")),
                              capture_output=True, timeout=30)
        st.update(ActiveState="inactive" if done.returncode == 0 else "failed",
                  SubState="dead" if done.returncode == 0 else "failed",
                  ExecMainStatus=str(done.returncode),
                  Result="success" if done.returncode == 0 else "exit-code")

    def fail(self, unit):
        self.state(unit).update(ActiveState="failed", SubState="failed", Result="signal")

    def unit_died(self, dead):
        for unit, text in self.loaded.items():
            if re.search(rf"^BindsTo={re.escape(dead)}$", text, re.M):
                self.state(unit).update(ActiveState="inactive", SubState="dead")

    def running(self, unit):
        return self.units.get(unit, {}).get("ActiveState") == "active"

    def verbs(self):
        return [c[0] for c in self.calls if c[0] != "show"]


class ApiClient:
    """host.api over a test client: get/post -> (status, json)."""

    def __init__(self, client):
        self.client = client

    def get(self, path):
        resp = self.client.get(path)
        return resp.status, resp.json

    def post(self, path, body):
        resp = self.client.post(path, body)
        return resp.status, resp.json


class FakeHost(Host):
    """The agent's Host as parts.md describes it, with FakeSystemd as `systemctl` (the
    node toolbox, write_file and ensure_unit, is the real Host's)."""

    def __init__(self, root, node, api=None, agent_unit=None):
        self.agent_unit = agent_unit
        self.root = str(root)
        self.allowed_roots = list(DEFAULT_ALLOWED_ROOTS)
        self.node = node
        self.agent = node
        self.api = api
        self.log = logging.getLogger("tests.service.host")
        self.state_dir = os.path.join(self.root, "var/lib/appliance-agent")
        self.systemd = FakeSystemd(self.root)

    def path(self, p):
        if ".." in p.split("/"):
            raise ValueError(f"{p}: .. is refused")
        return os.path.join(self.root, p.lstrip("/"))

    def systemctl(self, *args):
        return self.systemd(*args)

    def run(self, argv, timeout=60, input=None):
        done = subprocess.run(argv, capture_output=True, timeout=timeout, input=input)
        return done.returncode, (done.stdout + done.stderr).decode(errors="replace")
