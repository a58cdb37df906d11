"""Login, sessions, token refresh and the exit-code contract, against a real HTTP server."""

from __future__ import annotations

import json
import socket
import stat
import sys
import types

from appliance.cli.main import main, Environment
from appliance.cli.session import from_rfc3339, to_rfc3339

from .fake_api import PROJECT_ID


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- login / logout / whoami ---


def test_login_with_prompt_stores_a_private_session_file(cli, api):
    result = cli("login", "--username", "admin", tty=True)

    assert result.code == 0, result.stderr
    assert cli.prompts == [f"Password for admin at {api.url}: "]
    assert f"logged in to {api.url} as admin" in result.stdout
    assert stat.S_IMODE(cli.session_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.config_dir.stat().st_mode) == 0o700
    session = cli.session()
    assert session["endpoint"] == api.url
    assert session["access_token"] in api.access_tokens
    assert session["refresh_token"] in api.refresh_tokens
    assert from_rfc3339(session["expires_at"]) > cli.clock() + 3000
    assert api.token_bodies == [{"grant_type": "password", "username": "admin", "password": "s3cret", "scope": ""}]
    assert "s3cret" not in result.stdout + result.stderr


def test_login_password_from_stdin_with_project_scope(cli, api):
    result = cli("login", "--password-stdin", "--project", PROJECT_ID, stdin="s3cret\n")

    assert result.code == 0, result.stderr
    assert api.token_bodies[-1]["scope"] == f"project:{PROJECT_ID}"
    whoami = cli("whoami", "--json")
    assert whoami.json()["project_id"] == PROJECT_ID


def test_login_password_from_environment_and_endpoint_flag(cli, api, tmp_path):
    result = cli("login", "--endpoint", api.url + "/", environ={"APPLIANCE_ENDPOINT": "http://nowhere.invalid",
                                                                "APPLIANCE_PASSWORD": "s3cret"})
    assert result.code == 0, result.stderr
    assert cli.session()["endpoint"] == api.url  # trailing slash normalized away


def test_login_with_wrong_password_is_a_client_error_and_stores_nothing(cli, api):
    result = cli("login", stdin="wrong", environ={"APPLIANCE_PASSWORD": "wrong"})

    assert result.code == 1
    assert result.stderr == "error: invalid_grant: invalid username or password\n"
    assert not cli.session_path.exists()


def test_login_without_a_password_source_does_not_hang(cli, api):
    result = cli("login", tty=False)
    assert result.code == 2
    assert "--password-stdin" in result.stderr
    assert api.requests == []


def test_login_to_unreachable_endpoint_exits_4(cli):
    result = cli("login", "--endpoint", closed_port_url(), environ={"APPLIANCE_PASSWORD": "x"})
    assert result.code == 4
    assert "connection refused" in result.stderr
    assert "Traceback" not in result.stderr


def test_whoami_shows_user_project_and_permissions(cli, api):
    cli.login()
    result = cli("whoami")
    assert result.code == 0, result.stderr
    assert "admin" in result.stdout and api.admin_uuid in result.stdout
    assert "(unscoped)" in result.stdout
    assert "*.*.*" in result.stdout


def test_logout_revokes_token_and_removes_session(cli, api):
    cli.login()
    token = cli.session()["access_token"]

    result = cli("logout")

    assert result.code == 0, result.stderr
    assert not cli.session_path.exists()
    assert token not in api.access_tokens
    assert api.requests_to("/v1/iam/clients/default/actions/logout/invoke")[0]["authorization"] == f"Bearer {token}"
    assert cli("whoami").code == 5


def test_logout_removes_session_even_when_server_is_unreachable(cli, api):
    cli.login()
    session = cli.session()
    session["endpoint"] = closed_port_url()
    cli.session_path.write_text(json.dumps(session))

    result = cli("logout")

    assert result.code == 4
    assert "local session was removed" in result.stderr
    assert not cli.session_path.exists()


def test_logout_without_session_is_a_no_op(cli):
    result = cli("logout")
    assert result.code == 0
    assert "not logged in" in result.stderr


# --- exit codes ---


def test_no_session_exits_5_without_calling_the_server(cli, api):
    result = cli("list", "things")
    assert result.code == 5
    assert result.stderr == "error: not logged in; run `appliance login`\n"
    assert api.requests == []


def test_damaged_session_file_exits_5(cli, api):
    cli.config_dir.mkdir(parents=True)
    cli.session_path.write_text("{not json")
    result = cli("list", "things")
    assert result.code == 5
    assert "damaged" in result.stderr


def test_client_error_exits_1_with_server_message(cli, api):
    cli.login()
    result = cli("create", "things", "name=x", "colour=red")
    assert result.code == 1
    assert result.stderr == "error: unknown field 'colour'\n"


def test_not_found_exits_1(cli, api):
    cli.login()
    result = cli("show", "things/00000000-0000-0000-0000-00000000abcd")
    assert result.code == 1
    assert result.stderr == "error: thing 00000000-0000-0000-0000-00000000abcd not found\n"


def test_server_error_exits_3_with_server_message(cli, api):
    cli.login()
    result = cli("list", "boom")
    assert result.code == 3
    assert result.stderr == "error: database on fire\n"
    assert result.stdout == ""


def test_non_json_error_body_is_summarized(cli, api):
    cli.login()
    result = cli("list", "badgateway")
    assert result.code == 3
    assert result.stderr.startswith("error: HTTP 502 Bad Gateway: <html>")


def test_connection_refused_exits_4(cli, api):
    cli.login()
    session = cli.session()
    session["endpoint"] = closed_port_url()
    cli.session_path.write_text(json.dumps(session))
    result = cli("list", "things")
    assert result.code == 4
    assert result.stderr.startswith("error: cannot reach http://127.0.0.1:")


def test_timeout_exits_4(cli, api):
    cli.login()
    result = cli("list", "slow", "--timeout", "0.2")
    assert result.code == 4
    assert "timed out after 0.2s" in result.stderr


def test_token_is_not_sent_to_another_endpoint(cli, api):
    cli.login()
    api.requests.clear()
    result = cli("list", "things", "--endpoint", "http://127.0.0.1:1")
    assert result.code == 5
    assert "session is for" in result.stderr
    assert api.requests == []


def test_usage_errors_exit_2_on_stderr(cli, api):
    cli.login()
    assert cli("list").code == 2
    bad_field = cli("create", "things", "novalue")
    assert bad_field.code == 2
    assert bad_field.stderr == "error: expected key=value or key:=json, got 'novalue'\n"
    bad_json = cli("create", "things", "size:=three")
    assert bad_json.code == 2 and "size:= needs a JSON value" in bad_json.stderr
    assert cli("list", "things", "--limit", "0").code == 2
    assert cli("list", "http://example.org/v1/things").code == 2


def test_help_shows_example_and_exit_codes(cli):
    top = cli("--help")
    assert top.code == 0
    assert "exit codes:" in top.stdout and "5  not logged in" in top.stdout
    sub = cli("create", "--help")
    assert sub.code == 0
    assert "example:\n  appliance create iam/users" in sub.stdout
    assert "--data" in sub.stdout and "--json" in sub.stdout


# --- token refresh ---


def test_refresh_after_server_rejects_expired_token(cli, api):
    cli.login()
    old_access = cli.session()["access_token"]
    api.add_thing(name="a")
    api.expire_access_tokens()

    result = cli("list", "things", "--json")

    assert result.code == 0, result.stderr
    assert [thing["name"] for thing in result.json()] == ["a"]
    assert api.token_bodies[-1]["grant_type"] == "refresh_token"
    new_session = cli.session()
    assert new_session["access_token"] != old_access
    assert new_session["access_token"] in api.access_tokens
    assert stat.S_IMODE(cli.session_path.stat().st_mode) == 0o600
    sent_tokens = [request["authorization"] for request in api.requests_to("/v1/things/")]
    assert sent_tokens == [f"Bearer {old_access}", f"Bearer {new_session['access_token']}"]


def test_refresh_before_request_when_session_says_expired(cli, api):
    cli.login()
    old_access = cli.session()["access_token"]
    real_clock = cli.clock
    cli.clock = lambda: real_clock() + 7200  # two hours later: access token lapsed, refresh token alive

    result = cli("list", "things")

    assert result.code == 0, result.stderr
    things_requests = api.requests_to("/v1/things/")
    assert len(things_requests) == 1  # refreshed up front, no wasted 401
    assert things_requests[0]["authorization"] != f"Bearer {old_access}"


def test_refused_refresh_means_logged_out(cli, api):
    cli.login()
    api.expire_access_tokens()
    api.revoke_refresh_tokens()

    result = cli("list", "things")

    assert result.code == 5
    assert "could not be renewed" in result.stderr and "refresh token is not valid" in result.stderr


def test_refresh_happens_at_most_once(cli, api):
    cli.login()
    real_clock = cli.clock
    cli.clock = lambda: real_clock() + 7200
    api.access_ttl = 0  # every refreshed token is already expired: server keeps saying 401
    original_issue = api._issue

    def issue_expired(username, scope):
        tokens = original_issue(username, scope)
        api.access_tokens[tokens["access_token"]]["expired"] = True
        return tokens

    api._issue = issue_expired
    try:
        result = cli("list", "things")
    finally:
        del api._issue
    assert result.code == 5
    assert [body["grant_type"] for body in api.token_bodies].count("refresh_token") == 1


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
    import io

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
