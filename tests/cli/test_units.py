"""Pure helpers: path normalization, field parsing, column choice, config dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.cli import UsageError
from appliance.cli.client import api_path, normalize_endpoint
from appliance.cli.common import parse_fields
from appliance.cli.output import choose_columns, render_table
from appliance.cli.session import config_dir_from_environ


@pytest.mark.parametrize("raw", ["iam/users", "/iam/users", "v1/iam/users", "/v1/iam/users/", " iam//users/ "])
def test_api_path_collection(raw):
    assert api_path(raw, collection=True) == "/v1/iam/users/"
    assert api_path(raw, collection=False) == "/v1/iam/users"


@pytest.mark.parametrize("raw", ["", "/", "/v1/", "iam/../x", "iam/users?name=a", "https://host/v1/iam/users"])
def test_api_path_rejects(raw):
    with pytest.raises(UsageError):
        api_path(raw, collection=True)


def test_api_path_quotes_segments():
    assert api_path("dns/domains/a b", collection=False) == "/v1/dns/domains/a%20b"


def test_normalize_endpoint():
    assert normalize_endpoint("http://h:1/") == "http://h:1"
    assert normalize_endpoint("https://h/prefix/") == "https://h/prefix"
    with pytest.raises(UsageError):
        normalize_endpoint("h:1")


def test_parse_fields():
    assert parse_fields(["a=1", "b:=1", "c:=null", "d=x=y", "e=", 'f:={"k":[1]}', "g=a:=b"]) == {
        "a": "1", "b": 1, "c": None, "d": "x=y", "e": "", "f": {"k": [1]}, "g": "a:=b"}
    for bad in ["=x", ":=1", "novalue"]:
        with pytest.raises(UsageError):
            parse_fields([bad])


def test_choose_columns_puts_identity_first_and_skips_nested():
    rows = [{"created_at": "t", "extra": 1, "spec": {"a": 1}, "status": "NEW", "uuid": "u", "username": "n"}]
    assert choose_columns(rows) == ["uuid", "username", "status", "extra", "created_at"]


def test_render_table_of_scalars():
    assert render_table(["a", "b"]) == "a\nb"


def test_config_dir_precedence(tmp_path):
    home = Path("/home/someone")
    assert config_dir_from_environ({}, home) == home / ".config" / "appliance"
    assert config_dir_from_environ({"XDG_CONFIG_HOME": "/x"}, home) == Path("/x/appliance")
    assert config_dir_from_environ({"XDG_CONFIG_HOME": "/x", "APPLIANCE_CLI_CONFIG_DIR": "/c"}, home) == Path("/c")


def test_fields_may_follow_options_but_unknown_options_may_not(tmp_path):
    import io

    from appliance.cli.main import Environment, build_parser, parse_arguments, program

    env = Environment(stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(), config_dir=tmp_path,
                      environ={}, transport=None, getpass=input)
    parsed = parse_arguments(build_parser(env), ["create", "things", "a=1", "--json", "b:=2", "c=3"])
    assert parsed.fields == ["a=1", "b:=2", "c=3"]
    assert program(["create", "things", "a=1", "--bogus"], env) == 2
    assert "unrecognized arguments: --bogus" in env.stderr.getvalue()
    assert program(["list", "things", "extra=1"], env) == 2


def test_node_table_shows_address_and_hypervisor_not_the_disk_layout():
    from appliance.cli.output import render, table_rows
    node = {"uuid": "1" * 8, "name": "web", "status": "ACTIVE", "project_id": "p",
            "disk_spec": {"kind": "root_disk", "image": "https://example.org/long.qcow2"},
            "default_network": {"ipv4": "10.20.0.5", "mac": "52:54:00:00:00:01"},
            "hypervisor": "hv-1", "node_set": None, "power_state": "on", "cores": 2,
            "ram": 2048, "hostname": None, "description": None}
    header = render(table_rows("/v1/compute/nodes/", [node])).splitlines()[0].split()
    assert header[:5] == ["UUID", "NAME", "STATUS", "PROJECT_ID", "ADDRESS"]
    assert "HYPERVISOR" in header and "NODE_SET" not in header     # never set: no column
    assert "10.20.0.5" in render(table_rows("/v1/compute/nodes", [node]))


def test_set_and_service_tables_say_replicas_and_command():
    from appliance.cli.output import render, table_rows
    sets = render(table_rows("/v1/compute/sets/", [{"uuid": "s", "name": "web", "replicas": 3,
                                                    "nodes": ["a", "b"], "status": "NEW"}]))
    assert sets.splitlines()[0].split()[:5] == ["UUID", "NAME", "STATUS", "REPLICAS", "NODES"]
    service = {"uuid": "u", "name": "web", "path": "exec python3 -m http.server",
               "target": {"kind": "node", "node": "n-1"}, "service_type": {"kind": "simple"},
               "status": "ACTIVE", "project_id": "p"}
    table = render(table_rows("/v1/em/services/", [service]))
    assert "COMMAND" in table.splitlines()[0] and "PATH" not in table.splitlines()[0]
    assert "exec python3 -m http.server" in table


def test_columns_that_no_row_sets_are_dropped():
    rows = [{"uuid": "a", "name": "x", "description": None, "tags": [], "size": 1},
            {"uuid": "b", "name": "y", "description": "", "tags": [], "size": 2}]
    assert render_table(rows).splitlines()[0].split() == ["UUID", "NAME", "SIZE"]


def test_lb_info_is_a_view():
    from appliance.cli.lb import render_info
    info = {"uuid": "lb-1", "name": "web", "status": "ACTIVE", "type": {"kind": "core_agent"},
            "ipsv4": ["192.0.2.10"],
            "vhosts": [{"uuid": "v", "name": "www", "protocol": "https", "port": 443,
                        "domains": ["a.example"], "enabled": True,
                        "cert": {"kind": "certificate",
                                 "certificate": "/v1/secret/certificates/c-1"},
                        "routes": [{"uuid": "r", "name": None, "enabled": False, "condition": {
                            "kind": "prefix", "value": "/api/", "allowed_ips": ["10.0.0.0/8"],
                            "actions": [{"kind": "backend", "pool": "p",
                                         "protocol": {"kind": "http"}}]}}]}],
            "backend_pools": [{"uuid": "p", "name": "app", "endpoints": [
                {"kind": "host", "host": "10.0.0.5", "port": 8080, "weight": 1},
                {"kind": "node", "node": "/v1/compute/nodes/n-1", "port": 80}]}]}
    assert render_info(info).splitlines() == [
        "load balancer web  ACTIVE  type core_agent  lb-1",
        "  addresses: 192.0.2.10",
        "vhosts:",
        "  www: https port 443  a.example  cert c-1",
        "    route r: prefix /api/ -> app (http), from 10.0.0.0/8 (disabled)",
        "pools:",
        "  app: 10.0.0.5:8080 weight 1, node n-1:80",
    ]


def test_a_services_view_labels_its_command():
    from appliance.cli.output import detail_view, render
    view = render(detail_view("/v1/em/services/u", {"uuid": "u", "path": "exec sleep 1"}))
    assert view.splitlines() == ["uuid     u", "command  exec sleep 1"]
