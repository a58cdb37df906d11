"""One grammar in every group (issue 26, docs/cli.md): the argparse tree of `appliance`
is walked, and every group's list/show/add/update/delete take the same options with the
same defaults; the fields `add --help` lists are the served OpenAPI document's; and the
examples of the groups' `add --help` run against the real API."""

import argparse
import io
import re
import shlex

import pytest

from appliance.cli import schema
from appliance.cli.common import PROJECT_HELP, WAIT_TIMEOUT
from appliance.cli.main import Environment, build_parser

from .conftest import ADMIN_PROJECT, Cli

DAEMONS = ("delivery",)
# the groups of `appliance <group> [<collection>] <verb>`; each holds list/show/add/delete
GROUPS = ("iam", "vs", "dns", "secret", "compute", "services", "config", "lb", "sqldb")
LIST_OPTIONS = {"--filter", "--sort", "--desc", "--limit", "--marker", "--all", "--json"}


def subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {name: sub for name, sub in action.choices.items()}
    return {}


def every_parser(parser):
    yield parser
    for sub in dict.fromkeys(subcommands(parser).values()):
        yield from every_parser(sub)


def verb_sets(parser):
    """Every parser whose subcommands are a resource's verbs (list, show, add, delete)."""
    subs = subcommands(parser)
    if {"list", "show", "add", "delete"} <= set(subs):
        yield parser.prog, subs
    for sub in dict.fromkeys(subs.values()):
        yield from verb_sets(sub)


def option(parser, flag):
    return parser._option_string_actions.get(flag)


def positionals(parser):
    return [a.metavar or a.dest for a in parser._actions if not a.option_strings
            and not isinstance(a, argparse._SubParsersAction)]


@pytest.fixture(scope="module")
def top(tmp_path_factory):
    env = Environment(stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(),
                      config_dir=tmp_path_factory.mktemp("config"), environ={},
                      transport=None, getpass=input)
    return build_parser(env)


def resources(top):
    found = []
    for group in GROUPS:
        found.extend(verb_sets(subcommands(top)[group]))
    return found


def test_every_group_has_the_verbs(top):
    progs = [prog for prog, _ in resources(top)]
    for group in GROUPS:
        assert any(prog.split()[1] == group for prog in progs), group
    assert len(progs) >= 30


def test_list_show_add_delete_take_the_same_options(top):
    for prog, verbs in resources(top):
        listing = verbs["list"]
        assert LIST_OPTIONS <= set(listing._option_string_actions), prog
        assert option(listing, "--limit").default is None, prog
        for word in ("show", "delete"):
            assert positionals(verbs[word])[-1] == "NAME-OR-UUID", (prog, word)
            assert option(verbs[word], "--json"), (prog, word)
        add = verbs["add"]
        assert verbs.get("create") is add, f"{prog}: `create` is an alias of `add`"
        assert option(add, "-n") is option(add, "--name"), prog
        assert option(add, "--wait") and option(add, "--wait-timeout"), prog
        assert {"fields", "data"} <= {a.dest for a in add._actions}, prog
        if "update" in verbs:
            assert option(verbs["update"], "--wait"), prog


def test_project_option_is_the_same_everywhere(top):
    with_project = 0
    for parser in every_parser(top):
        action = option(parser, "-p")
        if action is None or parser.prog.split()[1] in ("backup", "agent", "repo", "em"):
            continue
        assert action is option(parser, "--project") is option(parser, "--project-id"), \
            parser.prog
        assert (action.dest, action.metavar, action.help) == ("project", "PROJECT",
                                                              PROJECT_HELP), parser.prog
        with_project += 1
    assert with_project >= 15


def test_a_top_level_project_resource_takes_a_project_on_add(top):
    """Where the create body has project_id (its add --help lists it) and the collection
    is no child of another item, `add` takes -p (a child is in its parent's project)."""
    checked = 0
    for prog, verbs in resources(top):
        add = verbs["add"]
        if not re.search(r"^  project_id\s", add.epilog or "", re.M):
            assert option(add, "-p") is None, prog
            continue
        if [p for p in positionals(add) if p != "FIELD"] or prog.endswith("sqldb versions"):
            continue    # a child is in its parent's project; a version in the admin project
        assert option(add, "-p"), prog
        checked += 1
    assert checked >= 12


def test_every_wait_has_the_one_default(top):
    waits = 0
    for parser in every_parser(top):
        timeout = option(parser, "--wait-timeout")
        if timeout is None:
            continue
        waits += 1
        assert option(parser, "--wait"), parser.prog
        assert timeout.default == WAIT_TIMEOUT, parser.prog
    assert waits > 40


def test_writes_that_lead_to_a_status_can_wait(top):
    """Every add and update of a record with a status (the served read schema says so)
    takes --wait; so do the actions that change one."""
    commands = subcommands(top)
    for words in (("config", "add"), ("sqldb", "users", "add"), ("sqldb", "databases", "add"),
                  ("compute", "volumes", "attach"), ("compute", "volumes", "detach"),
                  ("dns", "domains", "add"), ("dns", "records", "add"),
                  ("lb", "vhosts", "add"), ("lb", "routes", "add"), ("lb", "pools", "add"),
                  ("services", "restart"), ("iam", "users", "add")):
        parser = commands[words[0]]
        for word in words[1:]:
            parser = subcommands(parser)[word]
        assert option(parser, "--wait"), words


def test_add_help_lists_the_fields_with_types_and_which_are_required(top):
    for prog, verbs in resources(top):
        epilog = verbs["add"].epilog or ""
        assert "fields of the body" in epilog, prog
    nodes = subcommands(subcommands(subcommands(top)["compute"])["nodes"])["add"]
    assert re.search(r"\bcores\s+integer \(required, -c/--cores\)", nodes.epilog)
    bindings = subcommands(subcommands(subcommands(top)["iam"])["role_bindings"])["add"]
    assert re.search(r"\buser\s+reference /v1/iam/users, a name or UUID \(required\)",
                     bindings.epilog)


def test_the_shipped_fields_are_the_served_openapi_documents(real_api):
    """create_fields.json is made from GET /v1/openapi.json; a resource changed without
    regenerating it (python -m appliance.cli.schema FILE) fails here."""
    document = real_api.client().get("/v1/openapi.json").json
    assert schema.fields_from_openapi(document) == schema._load(), \
        "regenerate appliance/cli/create_fields.json: see appliance/cli/schema.py"


def add_examples(top):
    """The example lines of the add --help of iam, dns and secret, in the order a first
    session runs them (projects and users before bindings, a domain before its records)."""
    lines = []
    for prog, verbs in resources(top):
        if prog.split()[1] not in ("iam", "dns", "secret") or "certificates" in prog:
            continue
        epilog = verbs["add"].epilog
        lines.extend(epilog.split("example:\n", 1)[1].split("\n\n", 1)[0].splitlines())
    order = ["projects", "users", "roles", "domains"]
    return sorted((line.strip() for line in lines),
                  key=lambda line: next((i for i, w in enumerate(order) if f" {w} " in line),
                                        len(order)))


def test_the_add_examples_run(real_api, tmp_path, top):
    cli = Cli(tmp_path / "config", f"http://127.0.0.1:{real_api.port}")
    cli.login()
    assert cli("iam", "roles", "add", "-n", "viewer").code == 0
    ran = 0
    for line in add_examples(top):
        words = shlex.split(line)[1:]
        if words[:2] == ["iam", "roles"]:
            continue            # made above: the binding's example names it
        words = [{"DOMAIN": "example.test", "PROJECT": "demo"}.get(w, w) for w in words]
        if words[:2] in (["iam", "organizations"], ["iam", "permissions"],
                         ["iam", "permission_bindings"], ["iam", "clients"],
                         ["vs", "profiles"]):
            continue
        result = cli(*words)
        assert result.code == 0, (line, result.stderr)
        ran += 1
    assert ran >= 8
    # the example's binding names its user, role and project by name: sent as UUIDs
    binding = cli("--json", "iam", "role_bindings", "list").json()
    demo = cli("--json", "iam", "projects", "show", "demo").json()["uuid"]
    assert any(b["project"].endswith(demo) for b in binding if b.get("project"))
    # no project given: the administrator's default, the admin project
    assert cli("--json", "secret", "passwords", "show", "db").json()["project_id"] == \
        ADMIN_PROJECT
