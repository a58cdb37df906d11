"""The generic verbs (list, show, create, update, delete, action) against a real HTTP server."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def logged_in(cli, api):
    cli.login()
    api.requests.clear()
    return cli


def test_list_all_walks_every_page(logged_in, api):
    made = [api.add_thing(name=f"t{index}") for index in range(5)]

    result = logged_in("list", "things", "--all", "--limit", "2", "--json")

    assert result.code == 0, result.stderr
    assert [thing["uuid"] for thing in result.json()] == [thing["uuid"] for thing in made]
    markers = [dict(request["query"]).get("page_marker") for request in api.requests_to("/v1/things/")]
    assert markers == [None, made[1]["uuid"], made[3]["uuid"]]
    assert all(dict(request["query"])["page_limit"] == "2" for request in api.requests_to("/v1/things/"))


def test_list_all_stops_on_an_empty_last_page(logged_in, api):
    for index in range(4):
        api.add_thing(name=f"t{index}")
    result = logged_in("list", "things", "--all", "--limit", "2", "--json")
    assert result.code == 0, result.stderr
    assert len(result.json()) == 4
    assert len(api.requests_to("/v1/things/")) == 3  # the server announced a marker after the last full page


def test_list_one_page_hints_at_more(logged_in, api):
    made = [api.add_thing(name=f"t{index}") for index in range(3)]
    result = logged_in("list", "things", "--limit", "2", "--json")
    assert len(result.json()) == 2
    assert result.stderr == f"more items follow: add --all, or --marker {made[1]['uuid']}\n"


def test_list_filters_and_sorting_reach_the_server(logged_in, api):
    api.add_thing(name="b", status="ACTIVE")
    api.add_thing(name="a", status="ACTIVE")
    api.add_thing(name="c", status="NEW")

    result = logged_in("list", "things", "--filter", "status=active", "--sort", "name", "--desc", "--json")

    assert [thing["name"] for thing in result.json()] == ["b", "a"]
    assert api.requests_to("/v1/things/")[0]["query"] == [
        ("status", "active"), ("sort_key", "name"), ("sort_dir", "desc")]


def test_list_unknown_filter_is_the_servers_400(logged_in, api):
    result = logged_in("list", "things", "--filter", "colour=red")
    assert result.code == 1
    assert result.stderr == "error: cannot filter on unknown field 'colour'\n"


def test_list_table_for_people(logged_in, api):
    thing = api.add_thing(name="alpha", status="ACTIVE", description="x" * 100, tags=["a"])
    result = logged_in("list", "things")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["UUID", "NAME", "STATUS", "PROJECT_ID", "SIZE", "ENABLED", "DESCRIPTION"]
    assert lines[1].startswith(thing["uuid"])
    assert "alpha" in lines[1] and "ACTIVE" in lines[1] and "false" in lines[1]
    assert "x" * 37 + "..." in lines[1] and "x" * 41 not in lines[1]


def test_list_empty_collection(logged_in):
    assert logged_in("list", "things").stdout == "(no items)\n"
    assert logged_in("list", "things", "--json").json() == []


@pytest.mark.parametrize("path", ["things", "/things", "v1/things", "/v1/things", "/v1/things/", "things//"])
def test_collection_paths_are_normalized(logged_in, api, path):
    api.add_thing(name="n")
    result = logged_in("list", path, "--json")
    assert result.code == 0, result.stderr
    assert len(result.json()) == 1
    assert [request["path"] for request in api.requests] == ["/v1/things/"]


@pytest.mark.parametrize("form", ["things/{}", "/v1/things/{}/", "v1/things/{}"])
def test_item_paths_are_normalized(logged_in, api, form):
    thing = api.add_thing(name="n")
    result = logged_in("show", form.format(thing["uuid"]), "--json")
    assert result.code == 0, result.stderr
    assert result.json()["uuid"] == thing["uuid"]


def test_show_key_value_view(logged_in, api):
    thing = api.add_thing(name="alpha", tags=["a", "b"], size=3)
    result = logged_in("show", f"things/{thing['uuid']}")
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines() if len(line.split(None, 1)) == 2)
    assert rows["uuid"] == thing["uuid"]
    assert rows["name"] == "alpha"
    assert rows["tags"] == "a, b"
    assert rows["size"] == "3"
    assert rows["description"] == "-"


def test_create_with_string_and_typed_fields(logged_in, api):
    result = logged_in("create", "things", "name=alpha", "size:=3", "enabled:=true",
                       'tags:=["x","y"]', "description=size:=3 stays a string", "--json")

    assert result.code == 0, result.stderr
    created = result.json()
    stored = api.things[created["uuid"]]
    assert stored["name"] == "alpha"
    assert stored["size"] == 3
    assert stored["enabled"] is True
    assert stored["tags"] == ["x", "y"]
    assert stored["description"] == "size:=3 stays a string"
    assert api.requests[-1]["method"] == "POST" and api.requests[-1]["path"] == "/v1/things/"


def test_create_with_data_file_and_field_override(logged_in, api, tmp_path):
    body_file = tmp_path / "thing.json"
    body_file.write_text(json.dumps({"name": "from-file", "size": 1}))
    result = logged_in("create", "things", "--data", f"@{body_file}", "size:=2", "--json")
    assert result.code == 0, result.stderr
    assert (result.json()["name"], result.json()["size"]) == ("from-file", 2)


def test_create_with_data_from_stdin(logged_in, api):
    result = logged_in("create", "/v1/things/", "--data", "-", "--json", stdin='{"name": "piped"}')
    assert result.code == 0, result.stderr
    assert result.json()["name"] == "piped"


def test_create_rejects_bad_data_before_sending(logged_in, api):
    result = logged_in("create", "things", "--data", "{oops")
    assert result.code == 2
    assert result.stderr.startswith("error: --data is not valid JSON")
    assert api.requests == []


def test_update_sends_only_given_fields(logged_in, api):
    thing = api.add_thing(name="alpha", size=1)
    result = logged_in("update", f"things/{thing['uuid']}", "size:=5", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["size"] == 5 and result.json()["name"] == "alpha"
    assert api.requests[-1]["method"] == "PUT"
    assert logged_in("update", f"things/{thing['uuid']}").code == 2


def test_delete_then_delete_again(logged_in, api):
    thing = api.add_thing(name="doomed")
    first = logged_in("delete", f"things/{thing['uuid']}")
    assert first.code == 0, first.stderr
    assert first.stdout == f"deleted /v1/things/{thing['uuid']}\n"
    assert thing["uuid"] not in api.things
    second = logged_in("delete", f"things/{thing['uuid']}")
    assert second.code == 1
    assert "not found" in second.stderr


def test_action_invoke_with_body(logged_in, api):
    thing = api.add_thing(name="t")
    result = logged_in("action", f"things/{thing['uuid']}", "start", "reason=testing", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE"
    assert api.requests[-1]["path"] == f"/v1/things/{thing['uuid']}/actions/start/invoke"
    assert api.things[thing["uuid"]]["description"] == "testing"


def test_action_without_response_body(logged_in, api):
    thing = api.add_thing(name="t")
    result = logged_in("action", f"things/{thing['uuid']}", "ping")
    assert (result.code, result.stdout) == (0, "ping: done\n")


def test_action_get_reads_with_query(logged_in, api):
    thing = api.add_thing(name="t")
    result = logged_in("action", "--get", f"/v1/things/{thing['uuid']}", "stats", "verbose=1", "--json")
    assert result.code == 0, result.stderr
    assert result.json() == {"uuid": thing["uuid"], "echo": {"verbose": "1"}}
    assert api.requests[-1]["method"] == "GET"
    assert api.requests[-1]["path"] == f"/v1/things/{thing['uuid']}/actions/stats"


def test_unknown_action_is_a_client_error(logged_in, api):
    thing = api.add_thing(name="t")
    result = logged_in("action", f"things/{thing['uuid']}", "explode")
    assert result.code == 1
    assert result.stderr == "error: no action 'explode' on things\n"


def test_global_flags_before_the_command(logged_in, api):
    api.add_thing(name="t")
    result = logged_in("--json", "--timeout", "5", "list", "things")
    assert result.code == 0, result.stderr
    assert result.json()[0]["name"] == "t"
