"""Fixtures: the real API on Waitress (with the daemons a module names), and a runner for
`program()` whose transport is the real urllib one, recorded so tests can see what was sent."""

from __future__ import annotations

import dataclasses
import io
import json
import time
import urllib.parse
from pathlib import Path

import pytest

from appliance.cli.client import UrllibTransport
from appliance.cli.main import Environment, program

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.secret.conftest import DaemonProcess

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


@dataclasses.dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


@dataclasses.dataclass
class Sent:
    method: str
    url: str
    path: str
    query: list
    authorization: str | None
    body: object


class RecordingTransport:
    """The CLI's real transport, keeping a note of each request it sends."""

    def __init__(self):
        # An empty proxy map: a proxy configured on the test machine must not reroute loopback.
        self.inner = UrllibTransport(proxies={})
        self.sent: list[Sent] = []

    def __call__(self, method, url, headers, body, timeout, **trust):
        parts = urllib.parse.urlsplit(url)
        self.sent.append(Sent(method, url, parts.path, urllib.parse.parse_qsl(parts.query),
                              headers.get("Authorization"), json.loads(body) if body else None))
        # `trust` comes only for an https session (the TLS tests, test_login_trust.py)
        return self.inner(method, url, headers, body, timeout, **trust)

    def to(self, path):
        return [request for request in self.sent if request.path == path]


class Cli:
    """Runs `program()` with an injected Environment: no real home dir, terminal or proxy."""

    def __init__(self, config_dir: Path, endpoint: str | None):
        self.config_dir = config_dir
        self.environ = {"APPLIANCE_ENDPOINT": endpoint} if endpoint else {}
        self.clock = time.time
        # the CLI's waits between polls (console --follow): a test may act in them
        self.sleep = time.sleep
        self.prompts: list[str] = []
        self.typed_password = ADMIN_PASSWORD
        self.transport = RecordingTransport()
        # the user's terminal for login's trust-on-first-use question: None is no terminal,
        # else a function from the question to the typed answer
        self.ask = None

    @property
    def sent(self) -> list[Sent]:
        return self.transport.sent

    @property
    def session_path(self) -> Path:
        return self.config_dir / "session.json"

    def session(self) -> dict:
        return json.loads(self.session_path.read_text())

    def edit_session(self, **changes) -> None:
        self.session_path.write_text(json.dumps({**self.session(), **changes}))

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
            transport=self.transport,
            getpass=self._prompt,
            stdin_isatty=tty,
            stdout_isatty=False,
            clock=lambda: self.clock(),
            sleep=lambda seconds: self.sleep(seconds),
            ask=self.ask,
        )
        code = program(list(argv), env)
        return Result(code, stdout.getvalue(), stderr.getvalue())

    def login(self, *extra: str) -> Result:
        result = self("login", "--password-stdin", *extra, stdin=ADMIN_PASSWORD + "\n")
        assert result.code == 0, result.stderr
        return result


@pytest.fixture(scope="module")
def real_api(request, tmp_path_factory):
    """The real app on Waitress, with the daemons the test module names in DAEMONS."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    daemons = [DaemonProcess(name, srv.settings["state_dir"]).start()
               for name in getattr(request.module, "DAEMONS", ())]
    yield srv
    for daemon in daemons:
        daemon.stop()
    srv.stop()


@pytest.fixture
def cli(real_api, tmp_path) -> Cli:
    """A CLI pointed at the real API, not logged in."""
    return Cli(tmp_path / "config", f"http://127.0.0.1:{real_api.port}")


@pytest.fixture
def logged_in(cli) -> Cli:
    """A CLI logged in to the real API as admin, with nothing recorded yet."""
    cli.login()
    cli.sent.clear()
    return cli


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
