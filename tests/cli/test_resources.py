"""The generic verbs (list, show, create, update, delete, action) against the real API."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from .conftest import ADMIN_PROJECT

PROJECTS = "/v1/iam/projects/"


def make_projects(cli, count, **fields):
    """`count` new projects with a common unique description, to filter on; their uuids."""
    tag = uuidlib.uuid4().hex[:8]
    made = []
    for index in range(count):
        result = cli("--json", "create", "iam/projects", f"name=p-{tag}-{index}",
                     f"description={fields.get('description', tag)}")
        assert result.code == 0, result.stderr
        made.append(result.json()["uuid"])
    cli.sent.clear()
    return tag, made


def test_list_all_walks_every_page(logged_in):
    make_projects(logged_in, 5)
    everything = [p["uuid"] for p in logged_in("--json", "list", "iam/projects").json()]
    logged_in.sent.clear()

    result = logged_in("list", "iam/projects", "--all", "--limit", "2", "--json")

    assert result.code == 0, result.stderr
    assert [project["uuid"] for project in result.json()] == everything
    pages = logged_in.transport.to(PROJECTS)
    assert all(dict(request.query)["page_limit"] == "2" for request in pages)
    markers = [dict(request.query).get("page_marker") for request in pages]
    # each page starts after the last item of the one before; a last full page costs one more request
    assert markers == [None] + [everything[i] for i in range(1, len(everything), 2)][:len(pages) - 1]
    assert len(pages) == len(everything) // 2 + 1


def test_list_one_page_hints_at_more(logged_in):
    make_projects(logged_in, 3)
    result = logged_in("list", "iam/projects", "--limit", "2", "--json")
    page = result.json()
    assert len(page) == 2
    assert result.stderr == f"more items follow: add --all, or --limit 2 --marker {page[1]['uuid']}\n"
    rest = logged_in("list", "iam/projects", "--marker", page[1]["uuid"], "--json")
    assert rest.code == 0, rest.stderr
    assert logged_in.sent[-1].query == [("page_limit", "100"), ("page_marker", page[1]["uuid"])]
    assert page[1]["uuid"] not in [p["uuid"] for p in rest.json()]


def test_list_filters_and_sorting_reach_the_server(logged_in):
    tag, made = make_projects(logged_in, 3)
    names = [f"p-{tag}-0", f"p-{tag}-2"]

    result = logged_in("list", "iam/projects", "--filter", f"name={names[0]}", "--filter",
                       f"name={names[1]}", "--sort", "name", "--desc", "--json")

    assert [project["name"] for project in result.json()] == names[::-1]
    assert logged_in.transport.to(PROJECTS)[0].query == [
        ("name", names[0]), ("name", names[1]), ("sort_key", "name"), ("sort_dir", "desc")]


def test_list_unknown_filter_is_the_servers_400(logged_in):
    result = logged_in("list", "iam/projects", "--filter", "colour=red")
    assert result.code == 1
    assert result.stderr.startswith("error: ") and "colour" in result.stderr


def test_list_table_for_people(logged_in):
    tag, made = make_projects(logged_in, 1, description="x" * 100)
    result = logged_in("list", "iam/projects", "--filter", f"name=p-{tag}-0")
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["UUID", "NAME"] and "DESCRIPTION" in lines[0]
    assert lines[1].startswith(made[0])
    assert f"p-{tag}-0" in lines[1]
    assert "x" * 37 + "..." in lines[1] and "x" * 41 not in lines[1]


def test_list_empty_collection(logged_in):
    nothing = ("--filter", "name=nothing-of-that-name")
    assert logged_in("list", "iam/projects", *nothing).stdout == "(no items)\n"
    assert logged_in("list", "iam/projects", *nothing, "--json").json() == []


@pytest.mark.parametrize("path", ["iam/users", "/iam/users", "v1/iam/users", "/v1/iam/users",
                                  "/v1/iam/users/", "iam//users//"])
def test_collection_paths_are_normalized(logged_in, path):
    result = logged_in("list", path, "--json")
    assert result.code == 0, result.stderr
    assert [user["username"] for user in result.json()] == ["admin"]
    assert [request.path for request in logged_in.sent] == ["/v1/iam/users/"]


@pytest.mark.parametrize("form", ["iam/projects/{}", "/v1/iam/projects/{}/", "v1/iam/projects/{}"])
def test_item_paths_are_normalized(logged_in, form):
    result = logged_in("show", form.format(ADMIN_PROJECT), "--json")
    assert result.code == 0, result.stderr
    assert result.json()["uuid"] == ADMIN_PROJECT
    assert [request.path for request in logged_in.sent] == [PROJECTS + ADMIN_PROJECT]


def test_show_key_value_view(logged_in):
    made = logged_in("--json", "create", "dns/domains", "name=view.test", f"project_id={ADMIN_PROJECT}",
                     'tags:=["a","b"]').json()
    result = logged_in("show", f"dns/domains/{made['uuid']}")
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines() if len(line.split(None, 1)) == 2)
    assert rows["uuid"] == made["uuid"]
    assert rows["name"] == "view.test"
    assert rows["tags"] == "a, b"
    assert rows["sync_to_ecosystem"] == "false"
    assert rows["description"] == "-"


def test_create_with_string_and_typed_fields(logged_in):
    result = logged_in("create", "dns/domains", "name=typed.test", f"project_id={ADMIN_PROJECT}",
                       "sync_to_ecosystem:=false", 'tags:=["x","y"]',
                       "description=size:=3 stays a string", "--json")

    assert result.code == 0, result.stderr
    assert logged_in.sent[-1].body == {"name": "typed.test", "project_id": ADMIN_PROJECT,
                                       "sync_to_ecosystem": False, "tags": ["x", "y"],
                                       "description": "size:=3 stays a string"}
    stored = logged_in("--json", "show", f"dns/domains/{result.json()['uuid']}").json()
    assert (stored["tags"], stored["description"]) == (["x", "y"], "size:=3 stays a string")
    assert logged_in.sent[0].method == "POST" and logged_in.sent[0].path == "/v1/dns/domains/"


def test_create_with_data_file_and_field_override(logged_in, tmp_path):
    body_file = tmp_path / "project.json"
    body_file.write_text(json.dumps({"name": "from-file", "description": "one"}))
    result = logged_in("create", "iam/projects", "--data", f"@{body_file}", "description=two", "--json")
    assert result.code == 0, result.stderr
    assert (result.json()["name"], result.json()["description"]) == ("from-file", "two")


def test_create_with_data_from_stdin(logged_in):
    result = logged_in("create", "/v1/iam/projects/", "--data", "-", "--json", stdin='{"name": "piped"}')
    assert result.code == 0, result.stderr
    assert result.json()["name"] == "piped"


def test_create_rejects_bad_data_before_sending(logged_in):
    result = logged_in("create", "iam/projects", "--data", "{oops")
    assert result.code == 2
    assert result.stderr.startswith("error: --data is not valid JSON")
    assert logged_in.sent == []


def test_update_sends_only_given_fields(logged_in):
    tag, (project,) = make_projects(logged_in, 1)
    result = logged_in("update", f"iam/projects/{project}", "description=changed", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["description"] == "changed" and result.json()["name"] == f"p-{tag}-0"
    assert (logged_in.sent[-1].method, logged_in.sent[-1].body) == ("PUT", {"description": "changed"})
    assert logged_in("update", f"iam/projects/{project}").code == 2


def test_delete_then_delete_again(logged_in):
    tag, (project,) = make_projects(logged_in, 1)
    first = logged_in("delete", f"iam/projects/{project}")
    assert first.code == 0, first.stderr
    assert first.stdout == f"deleted /v1/iam/projects/{project}\n"
    assert logged_in("show", f"iam/projects/{project}").code == 1
    second = logged_in("delete", f"iam/projects/{project}")
    assert second.code == 1
    assert "not found" in second.stderr


def test_action_invoke_with_body(logged_in):
    made = logged_in("--json", "create", "secret/passwords", "name=rotate-me",
                     f"project_id={ADMIN_PROJECT}").json()
    result = logged_in("action", f"secret/passwords/{made['uuid']}", "regenerate", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["value"] != made["value"]
    assert logged_in.sent[-1].path == f"/v1/secret/passwords/{made['uuid']}/actions/regenerate/invoke"
    assert logged_in.sent[-1].body == {}


def test_action_without_response_body(logged_in):
    result = logged_in("action", "iam/clients/default", "logout")
    assert (result.code, result.stdout) == (0, "logout: done\n")
    assert logged_in.sent[-1].path == "/v1/iam/clients/default/actions/logout/invoke"


def test_action_get_reads_with_query(logged_in):
    result = logged_in("action", "--get", "/v1/iam/clients/default", "introspect", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["permissions"] == ["*.*.*"]
    assert (logged_in.sent[-1].method, logged_in.sent[-1].path) == (
        "GET", "/v1/iam/clients/default/actions/introspect")
    bad = logged_in("action", "--get", "iam/clients/default", "introspect", "--data", "{}")
    assert bad.code == 2


def test_unknown_action_is_a_client_error(logged_in):
    result = logged_in("action", f"iam/projects/{ADMIN_PROJECT}", "explode")
    assert result.code == 1
    assert result.stderr.startswith("error: ") and "explode" in result.stderr


def test_global_flags_before_the_command(logged_in):
    result = logged_in("--json", "--timeout", "5", "list", "iam/users")
    assert result.code == 0, result.stderr
    assert result.json()[0]["username"] == "admin"


def test_invalid_values_say_what_is_expected(logged_in):
    """The API's validation messages name the expected form, never just "invalid format"."""
    bad_uuid = logged_in("create", "dns/domains", "name=form.test", "project_id=default")
    assert bad_uuid.code == 1
    assert bad_uuid.stderr == "error: project_id: must be a UUID like 3f2b8c1e-5d4a-4c3b-9a7e-1f2e3d4c5b6a\n"
    bad_name = logged_in("create", "iam/projects", "name=-starts-with-a-dash")
    assert bad_name.code == 1
    assert bad_name.stderr.startswith("error: name: must match the pattern ^[A-Za-z0-9]")
    assert "-starts-with-a-dash" not in bad_name.stderr  # the value sent is never echoed
    assert "invalid format" not in bad_uuid.stderr + bad_name.stderr
    assert logged_in("--json", "list", "dns/domains", "--filter", "name=form.test").json() == []


def test_wait_without_the_daemon_says_what_it_waited_for(logged_in):
    """No delivery daemon runs beside this module's API: the wait ends at its timeout and
    says which daemon it was waiting for, instead of a bare timeout."""
    result = logged_in("secret", "passwords", "create", "name=undelivered",
                       f"project_id={ADMIN_PROJECT}", "--wait", "--wait-timeout", "0.5")
    assert result.code == 1
    assert result.stderr.startswith("waiting up to 0.5 s for the delivery daemon to write it to the "
                                    "data plane (/v1/secret/passwords/")
    assert "is still NEW after 0.5 s; is the daemon running?" in result.stderr
    assert "was saved" in result.stderr
    assert logged_in("--json", "secret", "passwords", "show", "undelivered").json()["status"] == "NEW"
