"""The reference's own CLI, `exordos` from PyPI, against a real appliance (`appliance up`:
the API and every daemon as child processes).

The CLI lives in a venv of its own, made once per version and kept under the repo's
`.venv/` (removed by `make clean`); a venv whose install did not finish has no stamp and
is made again. The first run needs PyPI; later runs do not.
"""

import contextlib
import faulthandler
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from tests.apiserver import TOKEN_PATH, free_port
from tests.conftest import ROOT, RUN_LOG_DIR
from tests import processes

EXORDOS_VERSION = "3.2.29"
CACHE = os.path.join(ROOT, ".venv", "refcli")
UP = "import sys; from appliance.supervisor import main; sys.exit(main(sys.argv[1:]))"
PIP_TIMEOUT = 600           # a first install downloads some 40 packages
READY_TIMEOUT = 60


@contextlib.contextmanager
def _locked(path):
    # two test runs of one checkout must not build the same venv at once
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def exordos_venv(version=EXORDOS_VERSION):
    """The path of the `exordos` program of that version, installing it when missing."""
    venv = os.path.join(CACHE, f"exordos-{version}")
    program = os.path.join(venv, "bin", "exordos")
    stamp = os.path.join(venv, ".complete")
    os.makedirs(CACHE, exist_ok=True)
    with _locked(os.path.join(CACHE, f"exordos-{version}.lock")):
        if os.path.exists(stamp):
            return program
        # a first install is a pip run from PyPI (tens of seconds on a busy machine): the
        # per-test stack dump would print every thread's stack into the CI log meanwhile
        faulthandler.cancel_dump_traceback_later()
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
        install = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q",
             "--disable-pip-version-check", f"exordos=={version}"],
            capture_output=True, text=True, timeout=PIP_TIMEOUT)
        if install.returncode != 0:
            pytest.fail(f"pip could not install exordos=={version} (PyPI is needed the first "
                        f"time):\n{install.stderr[-3000:]}")
        with open(stamp, "w") as f:
            f.write(version + "\n")
    return program


class Appliance:
    """`appliance up` over a fresh state directory, on free loopback ports.

    Its admin password is its own: a login that works proves that the API answering on
    the port is this one, and not a server of another test run that took the port
    between `free_port()` and the bind."""

    ATTEMPTS = 3

    def __init__(self, tmp):
        self.tmp = tmp
        self.admin_password = f"refcli-{secrets.token_hex(8)}"
        self.attempt = 0
        self.proc = None

    def start(self):
        self.attempt += 1
        self.state_dir = os.path.join(self.tmp, f"var-{self.attempt}")
        self.api_port, self.dns_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.api_port}"
        config_file = os.path.join(self.tmp, "appliance.yaml")
        with open(config_file, "w") as f:
            f.write("{}\n")      # keeps any /etc/appliance/appliance.yaml out
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
        env["APPLIANCE_ADMIN_PASSWORD"] = self.admin_password
        self.log_path = os.path.join(
            RUN_LOG_DIR, f"refcli-appliance-{os.getpid()}-{self.attempt}.log")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", UP, "--state-dir", self.state_dir,
                 "--api-port", str(self.api_port), "--dns-port", str(self.dns_port),
                 "--config", config_file],
                cwd=ROOT, env=env, stdout=log, stderr=log)
        return self

    def _log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def _logs_in(self):
        form = urllib.parse.urlencode({"grant_type": "password", "username": "admin",
                                       "password": self.admin_password}).encode()
        try:
            with urllib.request.urlopen(f"{self.url}{TOKEN_PATH}", data=form,
                                        timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    def wait_ready(self):
        """Started and answering; a port taken by someone else means new ports."""
        while True:
            deadline = time.monotonic() + READY_TIMEOUT
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    pytest.fail(f"appliance up exited with {self.proc.returncode}; see "
                                f"{self.log_path}")
                if "Address already in use" in self._log():
                    break
                if self._logs_in():
                    return self
                time.sleep(0.2)
            else:
                pytest.fail(f"the appliance was not ready in {READY_TIMEOUT} s; see "
                            f"{self.log_path}")
            self.stop()
            if self.attempt == self.ATTEMPTS:
                pytest.fail(f"a port was taken {self.ATTEMPTS} times; see {self.log_path}")
            self.start()

    def stop(self):
        if self.proc is not None:
            processes.stop(self.proc, 30)     # the supervisor stops its children


class Exordos:
    """Runs the real `exordos` program with a HOME of its own, whose
    `~/.exordos/exordosctl.yaml` names one realm: the appliance under test."""

    def __init__(self, program, home, url, cwd, password):
        self.program, self.home, self.cwd = program, home, cwd
        self.config_path = os.path.join(home, ".exordos", "exordosctl.yaml")
        os.makedirs(os.path.dirname(self.config_path), exist_ok=True)
        self.set_realm(url, "admin", password)

    def set_realm(self, url, user, password):
        config = {"current-realm": "appliance", "realms": {"appliance": {
            "name": "appliance", "endpoint": url, "current-context": user,
            "contexts": {user: {"user": user, "password": password}}}}}
        with open(self.config_path, "w") as f:
            yaml.safe_dump(config, f)

    @property
    def token_cache(self):
        return os.path.join(self.home, ".exordos", "exordos_tokens.json")

    def __call__(self, *args, timeout=180):
        env = {"HOME": self.home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "LANG": "C.UTF-8", "NO_PROXY": "127.0.0.1,localhost",
               # wide enough that no table cell is cut
               "COLUMNS": "250"}
        return subprocess.run([self.program, *args], cwd=self.cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)

    def ok(self, *args, **kw):
        result = self(*args, **kw)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def json(self, *args):
        """A list or show command with `-o json`, parsed."""
        return json.loads(self.ok(*args, "-o", "json").stdout)


@pytest.fixture(scope="package")
def appliance(tmp_path_factory):
    """One `appliance up` for the directory's modules (each took some 20 s to start one):
    what a module makes has a name of its own (refcli-...) and is what its asserts look
    for; the password change of test_session.py puts the old one back."""
    up = Appliance(str(tmp_path_factory.mktemp("appliance"))).start()
    try:
        yield up.wait_ready()
    finally:
        up.stop()


@pytest.fixture(scope="module")
def exordos(appliance, tmp_path_factory):
    work = tmp_path_factory.mktemp("exordos")
    home = work / "home"
    home.mkdir()
    return Exordos(exordos_venv(), str(home), appliance.url, str(work),
                   appliance.admin_password)


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
