"""Fixtures: a real Waitress server with the fake API, and a runner for `program()`."""

from __future__ import annotations

import dataclasses
import io
import json
import time
from pathlib import Path

import pytest

from appliance.cli.client import UrllibTransport
from appliance.cli.main import Environment, program

from tests.wsgiserver import LoopbackServer

from .fake_api import PASSWORD, FakeApi


@pytest.fixture(scope="session")
def api_server():
    fake = FakeApi()
    with LoopbackServer(fake.app) as server:
        yield fake, f"http://127.0.0.1:{server.port}"


@pytest.fixture
def api(api_server) -> FakeApi:
    fake, url = api_server
    fake.reset()
    fake.url = url
    return fake


@dataclasses.dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


class Cli:
    """Runs `program()` with an injected Environment: no real home dir, terminal or proxy."""

    def __init__(self, config_dir: Path, endpoint: str):
        self.config_dir = config_dir
        self.environ = {"APPLIANCE_ENDPOINT": endpoint}
        self.clock = time.time
        self.prompts: list[str] = []
        self.typed_password = PASSWORD

    @property
    def session_path(self) -> Path:
        return self.config_dir / "session.json"

    def session(self) -> dict:
        return json.loads(self.session_path.read_text())

    def _prompt(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.typed_password

    def __call__(self, *argv: str, stdin: str = "", environ: dict | None = None, tty: bool = False) -> Result:
        stdout, stderr = io.StringIO(), io.StringIO()
        env = Environment(
            stdin=io.StringIO(stdin),
            stdout=stdout,
            stderr=stderr,
            config_dir=self.config_dir,
            environ={**self.environ, **(environ or {})},
            # An empty proxy map: a proxy configured on the test machine must not reroute loopback.
            transport=UrllibTransport(proxies={}),
            getpass=self._prompt,
            stdin_isatty=tty,
            stdout_isatty=False,
            clock=lambda: self.clock(),
        )
        code = program(list(argv), env)
        return Result(code, stdout.getvalue(), stderr.getvalue())

    def login(self, *extra: str) -> Result:
        result = self("login", "--password-stdin", *extra, stdin=PASSWORD + "\n")
        assert result.code == 0, result.stderr
        return result


@pytest.fixture
def cli(tmp_path, api) -> Cli:
    return Cli(tmp_path / "config", api.url)


# ---- the real API, for the tests of the CLI against it -------------------------------------

@pytest.fixture(scope="module")
def real_api(request, tmp_path_factory):
    """The real app on Waitress, with the daemons the test module names in DAEMONS."""
    from tests.apiserver import ApiServer
    from tests.conftest import ADMIN_PASSWORD
    from tests.secret.conftest import DaemonProcess
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    daemons = [DaemonProcess(name, srv.settings["state_dir"]).start()
               for name in getattr(request.module, "DAEMONS", ())]
    yield srv
    for daemon in daemons:
        daemon.stop()
    srv.stop()


@pytest.fixture
def logged_in(real_api, tmp_path):
    """A CLI logged in to the real API as admin."""
    from tests.conftest import ADMIN_PASSWORD
    cli = Cli(tmp_path / "config", f"http://127.0.0.1:{real_api.port}")
    assert cli("login", "--password-stdin", stdin=ADMIN_PASSWORD + "\n").code == 0
    return cli
