"""`appliance <service> <collection> <verb>` against the real API and delivery daemon."""

import pytest

from tests.secret.conftest import remember

from .conftest import ADMIN_PROJECT


DAEMONS = ('delivery',)


@pytest.fixture
def cli(logged_in):
    """This module's tests talk to the real API (see conftest.real_api)."""
    return logged_in


def test_create_with_wait_shows_progress_and_ends_active(cli):
    value = remember("cli-secret-value-0fd2a1")
    result = cli("--json", "secret", "secrets", "create", "name=cli-one",
                 "project_id=00000000-0000-0000-0000-000000000000",
                 "constructor:={\"kind\": \"plain\"}", f"value={value}", "--wait")
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE"
    # what it waits for, then the status it reached; a state seen on the way (NEW) shows
    # only when the delivery daemon is slower than the first look, so it is not asserted
    assert "waiting up to" in result.stderr and "to be ACTIVE" in result.stderr
    assert f"{result.json()['uuid']}: ACTIVE (" in result.stderr
    assert value not in result.stderr


def test_items_by_name_and_hyphenated_collections(cli):
    made = cli("--json", "secret", "ssh-keys", "create", "name=cli-key",
               "project_id=00000000-0000-0000-0000-000000000000")
    assert made.code == 0, made.stderr
    remember(made.json()["private_key"])
    shown = cli("--json", "secret", "ssh_keys", "show", "cli-key", "--wait")
    assert shown.code == 0 and shown.json()["uuid"] == made.json()["uuid"]
    updated = cli("--json", "secret", "ssh-keys", "update", "cli-key", "description=mine",
                  "--wait")
    assert updated.code == 0 and updated.json()["description"] == "mine"
    assert updated.json()["status"] == "ACTIVE"
    assert cli("secret", "ssh-keys", "delete", "cli-key").code == 0
    missing = cli("secret", "ssh-keys", "show", "cli-key")
    assert missing.code == 1 and "cli-key" in missing.stderr


def test_iam_group_lists_users_by_username(cli):
    listed = cli("--json", "iam", "users", "list")
    assert [u["username"] for u in listed.json()] == ["admin"]
    shown = cli("--json", "iam", "users", "show", "admin")
    assert shown.code == 0 and shown.json()["username"] == "admin"


def test_group_help_names_the_verbs(cli):
    result = cli("secret", "passwords", "--help")
    assert result.code == 0
    for verb in ("list", "show", "create", "update", "delete"):
        assert verb in result.stdout


def test_secret_create_needs_no_constructor(cli):
    """`plain` is the only constructor kind, so the CLI sends it when none is given."""
    made = cli("--json", "secret", "secrets", "create", "name=no-constructor",
               f"project_id={ADMIN_PROJECT}", f"value={remember('no-constructor-value-5e1')}")
    assert made.code == 0, made.stderr
    assert made.json()["constructor"] == {"kind": "plain"}
    # one given is sent as given: the API's refusal of an unknown kind comes through
    other = cli("secret", "secrets", "create", "name=other-kind", f"project_id={ADMIN_PROJECT}",
                'constructor:={"kind": "vault"}')
    assert other.code == 1 and "constructor" in other.stderr
    assert cli("--json", "secret", "secrets", "list", "--filter", "name=other-kind").json() == []


def test_wait_on_a_secret_without_value_stops_at_once_and_says_why(cli):
    result = cli("secret", "secrets", "create", "name=empty-one", f"project_id={ADMIN_PROJECT}",
                 "--wait")
    assert result.code == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith("waiting up to 900 s for the delivery daemon to write it to the "
                               "data plane (/v1/secret/secrets/")
    assert "neither value nor default_value" in result.stderr
    assert "stays NEW by design" in result.stderr and "was saved" in result.stderr
    # it stopped on the first look instead of polling until the timeout
    shown = [line for line in lines if ": NEW (" in line]
    assert len(shown) == 1
    assert cli("--json", "secret", "secrets", "show", "empty-one").json()["status"] == "NEW"
    # given a value it is delivered, and the same --wait ends ACTIVE
    value = remember("empty-one-gets-a-value-81c")
    updated = cli("--json", "secret", "secrets", "update", "empty-one", f"value={value}", "--wait")
    assert updated.code == 0, updated.stderr
    assert updated.json()["status"] == "ACTIVE"


def test_wait_help_says_what_it_waits_for(cli):
    result = cli("secret", "secrets", "create", "--help")
    assert "the delivery daemon to write it to the data plane" in " ".join(result.stdout.split())
    assert "appliance secret secrets add -n token" in result.stdout


def test_secret_values_are_hidden_from_people_unless_asked(cli):
    value = remember("shown-only-on-request-0b7")
    made = cli("--json", "secret", "secrets", "create", "name=quiet", f"project_id={ADMIN_PROJECT}",
               f"value={value}", "--wait")
    assert made.code == 0, made.stderr
    password = cli("--json", "secret", "passwords", "create", "name=quiet-pw",
                   f"project_id={ADMIN_PROJECT}").json()
    remember(password["value"])
    for argv, secret in ((("secret", "secrets", "list"), value),
                         (("secret", "secrets", "show", "quiet"), value),
                         (("list", "secret/secrets"), value),
                         (("show", f"secret/secrets/{made.json()['uuid']}"), value),
                         (("secret", "passwords", "list"), password["value"]),
                         (("secret", "passwords", "show", "quiet-pw"), password["value"])):
        hidden = cli(*argv)
        assert hidden.code == 0, hidden.stderr
        assert secret not in hidden.stdout, argv
        if "show" in argv:
            assert "(hidden)" in hidden.stdout, argv
        shown = cli(*argv, "--show-values")
        assert secret in shown.stdout, argv
    # scripts get the server's JSON unchanged
    assert cli("--json", "secret", "secrets", "show", "quiet").json()["value"] == value
    # a key's private half is secret material too
    key = cli("--json", "secret", "ssh-keys", "create", "name=quiet-key",
              f"project_id={ADMIN_PROJECT}").json()
    remember(key["private_key"])
    table = cli("secret", "ssh-keys", "show", "quiet-key").stdout
    assert "OPENSSH PRIVATE KEY" not in table and "(hidden)" in table
    assert key["public_key"].split()[0] in table


def test_project_quotas_by_name_as_json_and_as_a_table(cli):
    made = cli("--json", "iam", "projects", "create", "name=quota-cli")
    assert made.code == 0, made.stderr
    usage = cli("--json", "iam", "projects", "quotas", "quota-cli")
    assert usage.code == 0, usage.stderr
    assert usage.json()["nodes"] == {"use": 0, "limit": 200, "unit": "nodes",
                                     "setting": "quota_nodes"}
    table = cli("iam", "projects", "quotas", made.json()["uuid"])
    assert table.code == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert ["config_bytes_per_node", "0", "4194304", "bytes",
            "quota_config_bytes_per_node"] in rows, table.stdout
