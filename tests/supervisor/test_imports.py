"""What each process of the appliance imports (issue 11: memory).

Megabytes depend on the machine; the modules a process loads do not. Two layouts:
- systemd runs each child alone (`python -m MODULE`): there a daemon must import only what
  it runs. Each runs here under module_probe.py, with the environment the supervisor gives
  its children; the probe records sys.modules when the process exits, and the test checks
  that heavy libraries it has no use for were never imported. A module imported late
  (inside a function) can only make this test miss something, never fail at random.
- `appliance up` forks every child from a supervisor that imported all of them first, so
  that the pages are shared: there the supervisor must hold every child module and must
  never have started a thread (forking a threaded process is unsafe).
"""

import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.apiserver import free_port
from tests import processes

from appliance import config
from appliance.supervisor import PROJECT_ROOT, child_environment, child_modules

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_probe.py")

# Libraries of the server side, by what they serve.
HTTP_SERVER = {"waitress"}
API = {"bottle", "jsonschema", "appliance.api", "appliance.api.resource"}
TOKENS = {"jwt"}
CRYPTO = {"cryptography"}
DNS_WIRE = {"dnslib"}
# read only when there is a config file: none here, unless the machine has the default one
CONFIG_FILE = set() if os.path.exists(config.DEFAULT_CONFIG_FILE) else {"yaml"}
HTTP_CLIENT = {"urllib.request", "http.client", "email", "ssl"}
TEST_ONLY = {"pytest", "openapi_spec_validator", "dns"}      # dns: dnspython
# hashlib's OpenSSL binding maps libcrypto, ~3 MB of RSS (issue 12's idle memory in the image)
OPENSSL = {"_hashlib", "hmac", "secrets"}
NEVER = {
    "api": DNS_WIRE | {"watchdog"},
    # resources in-process, without the API's routes, Bottle app and middleware
    # (appliance/registry.py)
    "builder": HTTP_SERVER | DNS_WIRE | {"appliance.app", "appliance.api.wsgi"},
    # the secrets only: the status of what node agents apply is the status daemon's
    "delivery": HTTP_SERVER | API | TOKENS | DNS_WIRE | CONFIG_FILE | HTTP_CLIENT | {
        "appliance.agent.status"},
    # the agent's status step over the store, with every capability's producer; no
    # decryption (a producer hands on sealed values, docs/agent.md)
    "status": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | CONFIG_FILE | HTTP_CLIENT,
    "dns": HTTP_SERVER | API | TOKENS | CRYPTO | CONFIG_FILE | HTTP_CLIENT | OPENSSL,
    "mirror": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | CONFIG_FILE,
    "compute": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | CONFIG_FILE | HTTP_CLIENT,
    # the node agent is an HTTP client of the API (docs/agent.md), nothing more
    "agent": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | CONFIG_FILE | OPENSSL,
    "backup": HTTP_SERVER | API | TOKENS | CRYPTO | DNS_WIRE | CONFIG_FILE | HTTP_CLIENT,
    # each ACME order runs in a process of its own (docs/certificates.md, "Memory")
    "certificates": HTTP_SERVER | API | TOKENS | DNS_WIRE | CONFIG_FILE | HTTP_CLIENT | {
        "acme", "josepy", "requests", "OpenSSL"},
    # DBaaS's control loop reads and writes the store only (docs/sqldb-failover.md)
    "sqldb": HTTP_SERVER | API | TOKENS | DNS_WIRE | CONFIG_FILE | HTTP_CLIENT,
}


class Probed:
    """`python -m module args` under the probe; its output is read for a readiness line."""

    def __init__(self, name, module, args, env, ready, tmp_path):
        self.name, self.ready = name, ready
        self.out = tmp_path / f"{name}.modules"
        self.lines = []
        self.seen = threading.Event()
        # -P: the probe's directory must not shadow anything; PYTHONPATH names the tree
        self.proc = subprocess.Popen([sys.executable, "-P", PROBE, str(self.out), module, *args],
                                     env=env, cwd=tmp_path,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if self.ready in line:
                self.seen.set()

    def wait_ready(self, timeout):
        assert self.seen.wait(timeout), f"{self.name} never said {self.ready!r}: " \
                                        f"{''.join(self.lines)[-3000:]}"

    def modules(self, timeout):
        """Wait until ready, stop with SIGTERM, return the set of modules it imported."""
        self.wait_ready(timeout)
        processes.stop(self.proc, 30)
        assert self.out.exists(), f"{self.name} left no module list: {''.join(self.lines)[-3000:]}"
        return set(self.out.read_text().split())

    def kill(self):
        processes.stop(self.proc, signum=signal.SIGKILL)


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
        for name, module in child_modules():
            ready = "serving on" if name == "api" else "started; watching"
            processes.append(Probed(name, module, [], env, ready, tmp_path))
        found = {p.name: imported(p.modules(timeout=90), NEVER[p.name] | TEST_ONLY)
                 for p in processes}
    finally:
        for p in processes:
            p.kill()
    assert found == {name: [] for name in found}
    assert set(found) == set(NEVER)


@pytest.mark.timeout(120)
def test_supervisor_preloads_every_child_module_and_never_starts_a_thread(tmp_path, settings):
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": PROJECT_ROOT,
           "APPLIANCE_ADMIN_PASSWORD": "probe-password"}
    args = ["--state-dir", settings["state_dir"], "--api-port", str(settings["api_port"]),
            "--dns-port", str(settings["dns_port"])]
    supervisor = Probed("supervisor", "appliance.supervisor", args, env,
                        "appliance API is ready", tmp_path)
    try:
        supervisor.wait_ready(timeout=90)
        # the probe's process is the supervisor itself (runpy, no exec)
        threads = os.listdir(f"/proc/{supervisor.proc.pid}/task")
        modules = supervisor.modules(timeout=1)
    finally:
        supervisor.kill()
    assert threads == [str(supervisor.proc.pid)]
    assert [m for _, m in child_modules() if m not in modules] == []
    assert imported(modules, TEST_ONLY) == []
    # the first-start bootstrap ran (in a forked child): its line was printed
    assert any("admin password of user 'admin'" in line for line in supervisor.lines)


def test_the_builder_registry_holds_what_the_api_registers(settings):
    """The builder runs manifests through appliance/registry.py, not the composition root:
    the same resources of the same classes, registered in the same order."""
    from appliance.app import build_api
    from appliance.registry import build_registry
    api = build_api(settings)
    registry = build_registry(settings, api.store)
    try:
        assert list(registry.resources) == list(api.resources)
        assert {p: type(r) for p, r in registry.resources.items()} == \
            {p: type(r) for p, r in api.resources.items()}
        assert registry.authenticate is not None
    finally:
        registry.close()
        api.close()
