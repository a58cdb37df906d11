"""`appliance <service> <collection> <verb>` against the real API and delivery daemon."""

import pytest

from tests.secret.conftest import remember


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
    assert "NEW" in result.stderr or "IN_PROGRESS" in result.stderr
    assert "ACTIVE" in result.stderr
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
