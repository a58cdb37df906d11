"""Login, sessions, token refresh and the exit-code contract, against the real API.

The real API never fails on purpose, so the server errors (5xx, a proxy's HTML page, a
server that never answers) come from a small misbehaving server made here; everything
else is the real app on real Waitress.
"""

from __future__ import annotations

import io
import json
import socket
import stat
import sys
import types

import bottle
import pytest

from appliance.cli.client import TOKEN_PATH
from appliance.cli.main import Environment, main
from appliance.cli.session import from_rfc3339, to_rfc3339

from tests.conftest import ADMIN_PASSWORD
from tests.wsgiserver import LoopbackServer

from .conftest import ADMIN_PROJECT, Cli

INTROSPECT = "/v1/iam/clients/default/actions/introspect"


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def failing_server():
    """What stands between a CLI and an API on a bad day: a 500 with the JSON error body
    and a proxy's 502 HTML page."""
    app = bottle.Bottle()

    @app.route("/v1/boom/")
    def boom():
        body = json.dumps({"type": "InternalError", "code": 500, "message": "database on fire"})
        return bottle.HTTPResponse(body, status=500, headers={"Content-Type": "application/json"})

    @app.route("/v1/badgateway/")
    def bad_gateway():
        return bottle.HTTPResponse("<html><body>502 Bad Gateway</body></html>", status=502)

    with LoopbackServer(app) as server:
        yield f"http://127.0.0.1:{server.port}"


@pytest.fixture
def silent_server():
    """A server that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def token_grants(cli) -> list[str]:
    return [request.body["grant_type"] for request in cli.transport.to(TOKEN_PATH)]


# --- login / logout / whoami ---


def test_login_with_prompt_stores_a_private_session_file(cli, real_api):
    result = cli("login", "--username", "admin", tty=True)

    assert result.code == 0, result.stderr
    url = f"http://127.0.0.1:{real_api.port}"
    assert cli.prompts == [f"Password for admin at {url}: "]
    assert f"logged in to {url} as admin" in result.stdout
    assert stat.S_IMODE(cli.session_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.config_dir.stat().st_mode) == 0o700
    session = cli.session()
    assert session["endpoint"] == url
    assert from_rfc3339(session["expires_at"]) > cli.clock() + 3000
    assert [r.body for r in cli.transport.to(TOKEN_PATH)] == [
        {"grant_type": "password", "username": "admin", "password": ADMIN_PASSWORD, "scope": ""}]
    assert ADMIN_PASSWORD not in result.stdout + result.stderr
    # the stored token is one the server accepts
    assert real_api.client(session["access_token"]).get(INTROSPECT).status == 200


def test_login_password_from_stdin_with_project_scope(cli):
    result = cli("login", "--password-stdin", "--project", ADMIN_PROJECT, stdin=ADMIN_PASSWORD + "\n")

    assert result.code == 0, result.stderr
    assert cli.transport.to(TOKEN_PATH)[-1].body["scope"] == f"project:{ADMIN_PROJECT}"
    assert cli("whoami", "--json").json()["project_id"] == ADMIN_PROJECT


def test_login_project_by_name(cli, real_api):
    """--project takes a name as well as a UUID: it is looked up with an unscoped token,
    which is revoked after; a name that names no project is an error and no session."""
    missing = cli("login", "--password-stdin", "--project", "no-such-project",
                  stdin=ADMIN_PASSWORD + "\n")
    assert (missing.code, missing.stderr) == (
        1, "error: no name 'no-such-project' in /v1/iam/projects/\n")
    assert not cli.session_path.exists()
    assert cli.sent[-1].path == "/v1/iam/clients/default/actions/logout/invoke"
    cli.login()
    made = cli("--json", "iam", "projects", "add", "-n", "login-by-name").json()
    scoped = cli("login", "--password-stdin", "--project", "login-by-name",
                 stdin=ADMIN_PASSWORD + "\n")
    assert scoped.code == 0, scoped.stderr
    assert cli.session()["scope"] == f"project:{made['uuid']}"


def test_login_password_from_environment_and_endpoint_flag(cli, real_api):
    url = f"http://127.0.0.1:{real_api.port}"
    result = cli("login", "--endpoint", url + "/", environ={"APPLIANCE_ENDPOINT": "http://nowhere.invalid",
                                                           "APPLIANCE_PASSWORD": ADMIN_PASSWORD})
    assert result.code == 0, result.stderr
    assert cli.session()["endpoint"] == url  # trailing slash normalized away


def test_login_finds_the_api_by_the_variables_appliance_up_reads(real_api, tmp_path):
    cli = Cli(tmp_path / "config", endpoint=None)
    password = {"APPLIANCE_PASSWORD": ADMIN_PASSWORD}
    port = str(real_api.port)
    # 0.0.0.0 is where `appliance up` listens on every address; a client connects over loopback.
    for host in (None, "127.0.0.1", "0.0.0.0"):
        environ = {**password, "APPLIANCE_API_PORT": port, **({"APPLIANCE_API_HOST": host} if host else {})}
        result = cli("login", environ=environ)
        assert result.code == 0, (host, result.stderr)
        assert cli.session()["endpoint"] == f"http://127.0.0.1:{port}"
    # APPLIANCE_ENDPOINT and --endpoint come first: a closed port named there is tried, not the variables
    closed = closed_port_url()
    for extra_args, environ in (((), {"APPLIANCE_ENDPOINT": closed}), (("--endpoint", closed), {})):
        result = cli("login", *extra_args, environ={**password, "APPLIANCE_API_PORT": port, **environ})
        assert result.code == 4 and closed[len("http://"):] in result.stderr


@pytest.mark.parametrize("port", ["eleven", "0", "70000", "-1"])
def test_login_with_a_bad_api_port_variable_sends_nothing(tmp_path, port):
    cli = Cli(tmp_path / "config", endpoint=None)
    result = cli("login", environ={"APPLIANCE_API_PORT": port, "APPLIANCE_PASSWORD": "x"})
    assert result.code == 2
    assert result.stderr == f"error: APPLIANCE_API_PORT must be a port number (1-65535), not {port!r}\n"
    assert cli.sent == []


def test_login_without_any_setting_tries_the_default_port(tmp_path):
    cli = Cli(tmp_path / "config", endpoint=None)
    cli("login", environ={"APPLIANCE_PASSWORD": "x"})  # whether anything listens there is not ours to know
    assert [r.url for r in cli.sent] == [f"http://127.0.0.1:11010{TOKEN_PATH}"]


def test_login_with_wrong_password_is_a_client_error_and_stores_nothing(cli):
    result = cli("login", environ={"APPLIANCE_PASSWORD": "wrong"})

    assert result.code == 1
    assert result.stderr.startswith("error: invalid_grant: ")
    assert not cli.session_path.exists()


def test_login_without_a_password_source_does_not_hang(cli):
    result = cli("login", tty=False)
    assert result.code == 2
    assert "--password-stdin" in result.stderr
    assert cli.sent == []


def test_login_to_unreachable_endpoint_exits_4(cli):
    result = cli("login", "--endpoint", closed_port_url(), environ={"APPLIANCE_PASSWORD": "x"})
    assert result.code == 4
    assert "connection refused" in result.stderr
    assert "Traceback" not in result.stderr


def test_whoami_shows_user_project_and_permissions(logged_in, real_api):
    token = logged_in.session()["access_token"]
    admin = real_api.client(token).get("/v1/iam/users/", query={"username": "admin"}).json[0]
    result = logged_in("whoami")
    assert result.code == 0, result.stderr
    assert f"user         admin ({admin['uuid']})" in result.stdout
    assert "(unscoped)" in result.stdout
    assert "*.*.*" in result.stdout


def test_logout_revokes_token_and_removes_session(logged_in, real_api):
    token = logged_in.session()["access_token"]

    result = logged_in("logout")

    assert result.code == 0, result.stderr
    assert not logged_in.session_path.exists()
    assert [r.authorization for r in logged_in.transport.to(
        "/v1/iam/clients/default/actions/logout/invoke")] == [f"Bearer {token}"]
    assert real_api.client(token).get(INTROSPECT).status == 401
    assert logged_in("whoami").code == 5


def test_logout_removes_session_even_when_server_is_unreachable(logged_in):
    logged_in.edit_session(endpoint=closed_port_url())

    result = logged_in("logout")

    assert result.code == 4
    assert "local session was removed" in result.stderr
    assert not logged_in.session_path.exists()


def test_logout_without_session_is_a_no_op(cli):
    result = cli("logout")
    assert result.code == 0
    assert "not logged in" in result.stderr
    assert cli.sent == []


# --- exit codes ---


def test_no_session_exits_5_without_calling_the_server(cli):
    result = cli("list", "iam/users")
    assert result.code == 5
    assert result.stderr == "error: not logged in; run `appliance login`\n"
    assert cli.sent == []


def test_damaged_session_file_exits_5(cli):
    cli.config_dir.mkdir(parents=True)
    cli.session_path.write_text("{not json")
    result = cli("list", "iam/users")
    assert result.code == 5
    assert "damaged" in result.stderr


def test_client_error_exits_1_with_server_message(logged_in):
    result = logged_in("create", "iam/projects", "name=x", "colour=red")
    assert result.code == 1
    assert result.stderr == "error: unknown field(s) for Project: colour\n"


def test_not_found_exits_1(logged_in):
    result = logged_in("show", "iam/projects/00000000-0000-0000-0000-00000000abcd")
    assert result.code == 1
    assert result.stderr.startswith("error: ") and "not found" in result.stderr


def test_conflict_exits_1(logged_in):
    assert logged_in("create", "iam/projects", "name=twice").code == 0
    again = logged_in("create", "iam/projects", "name=twice")
    assert again.code == 1 and "already exists" in again.stderr


def test_server_error_exits_3_with_server_message(logged_in, failing_server):
    logged_in.edit_session(endpoint=failing_server)
    result = logged_in("list", "boom")
    assert result.code == 3
    assert result.stderr == "error: database on fire\n"
    assert result.stdout == ""


def test_non_json_error_body_is_summarized(logged_in, failing_server):
    logged_in.edit_session(endpoint=failing_server)
    result = logged_in("list", "badgateway")
    assert result.code == 3
    assert result.stderr.startswith("error: HTTP 502 Bad Gateway: <html>")


def test_connection_refused_exits_4(logged_in):
    logged_in.edit_session(endpoint=closed_port_url())
    result = logged_in("list", "iam/users")
    assert result.code == 4
    assert result.stderr.startswith("error: cannot reach http://127.0.0.1:")


def test_timeout_exits_4(logged_in, silent_server):
    logged_in.edit_session(endpoint=silent_server)
    result = logged_in("list", "iam/users", "--timeout", "0.2")
    assert result.code == 4
    assert "timed out after 0.2s" in result.stderr


def test_token_is_not_sent_to_another_endpoint(logged_in):
    result = logged_in("list", "iam/users", "--endpoint", "http://127.0.0.1:1")
    assert result.code == 5
    assert "session is for" in result.stderr
    assert logged_in.sent == []


def test_usage_errors_exit_2_on_stderr_and_send_nothing(logged_in):
    assert logged_in("list").code == 2
    bad_field = logged_in("create", "iam/projects", "novalue")
    assert bad_field.code == 2
    assert bad_field.stderr == "error: expected key=value or key:=json, got 'novalue'\n"
    bad_json = logged_in("create", "iam/projects", "size:=three")
    assert bad_json.code == 2 and "size:= needs a JSON value" in bad_json.stderr
    assert logged_in("list", "iam/projects", "--limit", "0").code == 2
    assert logged_in("list", "http://example.org/v1/iam/projects").code == 2
    assert logged_in.sent == []


def test_help_shows_example_and_exit_codes(cli):
    top = cli("--help")
    assert top.code == 0
    assert "exit codes:" in top.stdout and "5  not logged in" in top.stdout
    sub = cli("create", "--help")
    assert sub.code == 0
    assert "example:\n  appliance create iam/users" in sub.stdout
    assert "--data" in sub.stdout and "--json" in sub.stdout
    login = cli("login", "--help")
    assert "APPLIANCE_API_PORT" in login.stdout and "--endpoint URL" in login.stdout
    assert cli.sent == []


# --- token refresh ---


def test_refresh_after_server_rejects_the_token(logged_in):
    # The server no longer knows the token (as after a restart with new keys): 401.
    logged_in.edit_session(access_token="no-longer-valid")

    result = logged_in("--json", "list", "iam/users")

    assert result.code == 0, result.stderr
    assert [user["username"] for user in result.json()] == ["admin"]
    assert token_grants(logged_in) == ["refresh_token"]
    new_token = logged_in.session()["access_token"]
    assert new_token != "no-longer-valid"
    assert stat.S_IMODE(logged_in.session_path.stat().st_mode) == 0o600
    assert [r.authorization for r in logged_in.transport.to("/v1/iam/users/")] == [
        "Bearer no-longer-valid", f"Bearer {new_token}"]


def test_refresh_before_request_when_session_says_expired(logged_in):
    old_access = logged_in.session()["access_token"]
    real_clock = logged_in.clock
    logged_in.clock = lambda: real_clock() + 7200  # two hours on: access token lapsed, refresh token alive

    result = logged_in("list", "iam/users")

    assert result.code == 0, result.stderr
    users_requests = logged_in.transport.to("/v1/iam/users/")
    assert len(users_requests) == 1  # refreshed up front, no wasted 401
    assert users_requests[0].authorization != f"Bearer {old_access}"
    assert token_grants(logged_in) == ["refresh_token"]


def test_refused_refresh_means_logged_out(logged_in):
    logged_in.edit_session(access_token="no-longer-valid", refresh_token="neither-this")

    result = logged_in("list", "iam/users")

    assert result.code == 5
    assert "could not be renewed" in result.stderr and "invalid_grant" in result.stderr


def test_refresh_happens_at_most_once(logged_in):
    # Something on the way (a broken proxy, say) mangles every bearer token: the server keeps
    # answering 401, and the CLI must give up after one refresh instead of looping.
    inner = logged_in.transport.inner

    def mangling(method, url, headers, body, timeout):
        if "Authorization" in headers:
            headers = {**headers, "Authorization": headers["Authorization"] + "x"}
        return inner(method, url, headers, body, timeout)

    logged_in.transport.inner = mangling
    result = logged_in("list", "iam/users")
    assert result.code == 5
    assert token_grants(logged_in) == ["refresh_token"]
    assert len(logged_in.transport.to("/v1/iam/users/")) == 2


# --- delegation and the process shell ---


def test_up_is_delegated_to_the_supervisor(cli, monkeypatch):
    received = []
    fake_supervisor = types.ModuleType("appliance.supervisor")
    fake_supervisor.main = lambda argv: received.append(argv) or 7
    monkeypatch.setitem(sys.modules, "appliance.supervisor", fake_supervisor)

    assert cli("up", "--state-dir", "/tmp/x", "--help").code == 7
    assert received == [["--state-dir", "/tmp/x", "--help"]]
    # Global options before `up` reach it through the parser instead.
    assert cli("--json", "up", "--api-port", "1").code == 7
    assert received[-1] == ["--api-port", "1"]


def test_up_without_a_supervisor_is_an_error_not_a_traceback(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "appliance.supervisor", None)  # None makes the import fail
    result = cli("up")
    assert result.code == 1
    assert result.stderr.startswith("error: `appliance up` is not available")


def test_main_turns_an_unexpected_failure_into_one_line(tmp_path):
    def broken_transport(*_args):
        raise RuntimeError("kaboom")

    stderr = io.StringIO()
    env = Environment(stdin=io.StringIO(), stdout=io.StringIO(), stderr=stderr, config_dir=tmp_path,
                      environ={"APPLIANCE_PASSWORD": "x"}, transport=broken_transport, getpass=input)
    assert main(["login"], env) == 1
    assert stderr.getvalue() == ("error: unexpected failure: RuntimeError: kaboom"
                                 " (set APPLIANCE_CLI_DEBUG=1 for a traceback)\n")


def test_session_expiry_round_trips():
    assert from_rfc3339(to_rfc3339(1_800_000_000)) == 1_800_000_000
