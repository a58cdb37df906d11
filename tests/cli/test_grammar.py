"""The one grammar's behaviour against the real API (issue 26, docs/cli.md): names where
UUIDs are taken, an ambiguous name, the default project and the error where there is
none, a user made without a password."""

import uuid

from .conftest import ADMIN_PROJECT, Cli


def ok(result):
    assert result.code == 0, result.stderr
    return result.json()


def test_an_ambiguous_name_lists_the_candidates(logged_in):
    project = ok(logged_in("--json", "iam", "projects", "add", "-n", "twin-proj"))
    first = ok(logged_in("--json", "secret", "passwords", "add", "-n", "twin"))
    second = ok(logged_in("--json", "secret", "passwords", "add", "-n", "twin",
                          "-p", "twin-proj"))
    assert (first["project_id"], second["project_id"]) == (ADMIN_PROJECT, project["uuid"])
    shown = logged_in("secret", "passwords", "show", "twin")
    assert shown.code == 1
    assert "2 items named 'twin'" in shown.stderr
    for made in (first, second):
        assert f"{made['uuid']} (project {made['project_id']})" in shown.stderr
    assert ok(logged_in("--json", "secret", "passwords", "show", second["uuid"]))["uuid"] == \
        second["uuid"]


def test_the_project_option_takes_a_name_and_the_old_spelling(logged_in):
    project = ok(logged_in("--json", "iam", "projects", "add", "-n", "named-proj"))
    by_name = ok(logged_in("--json", "dns", "domains", "add", "-n", "named.test",
                           "-p", "named-proj"))
    assert by_name["project_id"] == project["uuid"]
    # the old key=value spelling still works beside the options, a name included
    old = ok(logged_in("--json", "secret", "passwords", "create", "name=old-style",
                       "project_id=named-proj"))
    assert old["project_id"] == project["uuid"]
    logged_in.sent.clear()
    missing = logged_in("secret", "passwords", "add", "-n", "x", "-p", "no-such-proj")
    assert missing.code == 1 and "no name 'no-such-proj' in /v1/iam/projects/" in missing.stderr
    assert not [s for s in logged_in.sent if s.method == "POST" and "passwords" in s.path]


def test_a_user_without_a_password_is_told_it_cannot_log_in(logged_in):
    made = logged_in("--json", "iam", "users", "add", "-n", "no-pass-user")
    assert made.code == 0
    assert "no-pass-user has no password, so it cannot log in until one is set" in made.stderr
    assert "appliance iam users update no-pass-user password=" in made.stderr
    given = logged_in("--json", "iam", "users", "add", "-n", "pass-user",
                      "password=s3cret-pass-9")
    assert given.code == 0 and given.stderr == ""


def test_a_user_with_no_default_project_is_told_how_to_give_one(logged_in, real_api,
                                                               tmp_path):
    """An unscoped token of a user who may not read the admin project: no default, and
    the error says how to give a project; nothing is created."""
    name = f"owner-{uuid.uuid4().hex[:6]}"
    ok(logged_in("--json", "iam", "users", "add", "-n", name, "password=s3cret-pass-9"))
    for project in ("own-a", "own-b"):
        ok(logged_in("--json", "iam", "projects", "add", "-n", project))
        ok(logged_in("--json", "iam", "role_bindings", "add", f"user={name}",
                     "role=owner", f"project={project}"))
    user = Cli(tmp_path / "user", f"http://127.0.0.1:{real_api.port}")
    assert user("login", "--username", name, "--password-stdin",
                stdin="s3cret-pass-9\n").code == 0
    refused = user("secret", "passwords", "add", "-n", "nowhere")
    assert refused.code == 1, refused.stderr
    assert "the token is not scoped to a project" in refused.stderr
    assert "appliance login --project NAME" in refused.stderr and "-p/--project" in refused.stderr
    assert not ok(logged_in("--json", "list", "secret/passwords", "--filter", "name=nowhere"))
    # an owner may not read IAM projects, so cannot name one: told to give its UUID
    by_name = user("login", "--username", name, "--password-stdin", "--project", "own-a",
                   stdin="s3cret-pass-9\n")
    assert by_name.code == 1 and "cannot look the project 'own-a' up by name" in \
        by_name.stderr and "give its UUID" in by_name.stderr
    own_a = ok(logged_in("--json", "iam", "projects", "show", "own-a"))["uuid"]
    scoped = user("login", "--username", name, "--password-stdin", "--project", own_a,
                  stdin="s3cret-pass-9\n")
    assert scoped.code == 0, scoped.stderr
    made = ok(user("--json", "secret", "passwords", "add", "-n", "somewhere"))
    assert made["project_id"] == own_a



def test_wait_on_a_record_without_a_status_ends_when_the_api_answers(logged_in):
    """--wait is on every add/update/show; where the record has no status (a DNS domain,
    an IAM role) there is nothing to wait for, so it does not poll until the timeout."""
    domain = logged_in("--json", "dns", "domains", "add", "-n", "nostatus.test", "--wait",
                       "--wait-timeout", "5")
    assert domain.code == 0 and "waiting" not in domain.stderr, domain.stderr
    shown = logged_in("--json", "iam", "roles", "show", "admin", "--wait",
                      "--wait-timeout", "5")
    assert shown.code == 0 and shown.json()["name"] == "admin"
    assert "waiting" not in shown.stderr
