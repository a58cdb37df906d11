import os
import signal
import subprocess
import sys
import time

import pytest

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD, ROOT, RUN_LOG_DIR, SECRET_VALUES
from tests import processes


class DaemonProcess:
    """A real daemon process (`python -m daemons.<name>`) over a state dir; its log goes
    to the run's log directory."""

    def __init__(self, name, state_dir, env=None):
        self.name, self.state_dir = name, state_dir
        self.extra_env = env or {}
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(os.path.join(RUN_LOG_DIR, f"{self.name}-{os.getpid()}-"
                                             f"{id(self)}-{self.starts}.log"), "wb")
        env = dict(os.environ, PYTHONPATH=ROOT, APPLIANCE_STATE_DIR=self.state_dir,
                   APPLIANCE_LOG_LEVEL="DEBUG", **self.extra_env)
        self.proc = subprocess.Popen([sys.executable, "-m", f"daemons.{self.name}"],
                                     cwd=ROOT, env=env, stdout=log, stderr=log)
        log.close()
        return self

    def kill(self):
        processes.stop(self.proc, signum=signal.SIGKILL)

    def stop(self):
        if self.proc:
            processes.stop(self.proc, 5)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def delivery(server):
    daemon = DaemonProcess("delivery", server.settings["state_dir"]).start()
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def acme_world(server):
    """Pebble + our DNS daemon + the API + the certificate daemon (tests/secret/pebble.py),
    over the module's API server."""
    from .pebble import AcmeWorld
    world = AcmeWorld(None, api=server).start()
    yield world
    world.stop()


def wait_for(predicate, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)


def remember(value):
    """Note a secret value: the last test of the run greps every log for it."""
    SECRET_VALUES.add(value)
    return value


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
