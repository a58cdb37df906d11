"""Each process of the appliance imports only what it runs (issue 11: memory).

Megabytes depend on the machine; the modules a process loads do not. So every real
process — the supervisor and each child, started with the very command and environment
the supervisor gives it — runs under module_probe.py, which records sys.modules when the
process exits; the test then checks that heavy libraries the process has no use for were
never imported. A module imported late (inside a function) can only make this test miss
something, never fail at random.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.apiserver import free_port

from appliance import config
from appliance.supervisor import PROJECT_ROOT, child_commands, child_environment

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_probe.py")

# Libraries of the server side, by what they serve.
HTTP_SERVER = {"waitress"}
API = {"bottle", "jsonschema", "appliance.api", "appliance.api.resource"}
TOKENS = {"jwt"}
CRYPTO = {"cryptography"}
DNS_WIRE = {"dnslib"}
STORE = {"state", "tinydb", "watchdog", "orjson"}
# read only when there is a config file: none here, unless the machine has the default one
CONFIG_FILE = set() if os.path.exists(config.DEFAULT_CONFIG_FILE) else {"yaml"}
HTTP_CLIENT = {"urllib.request", "http.client", "email", "ssl"}
TEST_ONLY = {"pytest", "openapi_spec_validator", "dns"}      # dns: dnspython

NEVER = {
    "supervisor": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | STORE | CONFIG_FILE
    | HTTP_CLIENT | {"appliance.bootstrap", "appliance.iam"},
    "api": DNS_WIRE,
    "builder": HTTP_SERVER | DNS_WIRE,
    "delivery": HTTP_SERVER | TOKENS | DNS_WIRE | CONFIG_FILE,
    "dns": HTTP_SERVER | API | TOKENS | CRYPTO | CONFIG_FILE | HTTP_CLIENT,
    "mirror": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | CONFIG_FILE,
    "compute": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | CONFIG_FILE | HTTP_CLIENT,
    "agent": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | CONFIG_FILE | HTTP_CLIENT,
}


def probed(out, argv):
    """argv (`python [-P] -m MODULE ARGS`) run under the probe instead."""
    module_at = argv.index("-m") + 1
    return [sys.executable, "-P", PROBE, str(out), argv[module_at], *argv[module_at + 1:]]


class Probed:
    """A process under the probe; its stderr and stdout are read for a readiness line."""

    def __init__(self, name, argv, env, ready, tmp_path):
        self.name, self.ready = name, ready
        self.out = tmp_path / f"{name}.modules"
        self.lines = []
        self.seen = threading.Event()
        self.proc = subprocess.Popen(probed(self.out, argv), env=env, cwd=tmp_path,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if self.ready in line:
                self.seen.set()

    def modules(self, timeout):
        """Wait until ready, stop with SIGTERM, return the set of modules it imported."""
        assert self.seen.wait(timeout), f"{self.name} never said {self.ready!r}: " \
                                        f"{''.join(self.lines)[-3000:]}"
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.out.exists(), f"{self.name} left no module list: {''.join(self.lines)[-3000:]}"
        return set(self.out.read_text().split())

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def imported(modules, names):
    """The names (packages included) of which some module was imported."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


@pytest.fixture
def settings(tmp_path):
    return config.load(environ={}, overrides={
        "state_dir": str(tmp_path / "var"), "api_port": free_port(),
        "dns_port": free_port(), "admin_password": "probe-password", "log_level": "INFO"})


@pytest.mark.timeout(180)
def test_each_child_imports_only_what_it_runs(tmp_path, settings):
    env = child_environment(settings, environ={"PATH": os.environ.get("PATH", "")})
    env.pop("APPLIANCE_CONFIG", None)
    processes = []
    try:
        for name, argv in child_commands():
            ready = "serving on" if name == "api" else "started; watching"
            processes.append(Probed(name, argv, env, ready, tmp_path))
        found = {p.name: imported(p.modules(timeout=90), NEVER[p.name] | TEST_ONLY)
                 for p in processes}
    finally:
        for p in processes:
            p.kill()
    assert found == {name: [] for name in found}
    assert set(found) == set(NEVER) - {"supervisor"}


@pytest.mark.timeout(120)
def test_supervisor_imports_neither_the_store_nor_the_api(tmp_path, settings):
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": PROJECT_ROOT,
           "APPLIANCE_ADMIN_PASSWORD": "probe-password"}
    argv = [sys.executable, "-m", "appliance.supervisor",
            "--state-dir", settings["state_dir"], "--api-port", str(settings["api_port"]),
            "--dns-port", str(settings["dns_port"])]
    supervisor = Probed("supervisor", argv, env, "appliance API is ready", tmp_path)
    try:
        modules = supervisor.modules(timeout=90)
    finally:
        supervisor.kill()
    assert "appliance.supervisor" not in modules      # it ran as __main__, not imported
    assert imported(modules, NEVER["supervisor"] | TEST_ONLY) == []
    # the first-start bootstrap ran (in a forked child): the password line was printed
    assert any("admin password of user 'admin'" in line for line in supervisor.lines)
