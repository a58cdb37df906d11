"""`appliance lb ...` against the real API."""

from __future__ import annotations

import uuid

import pytest

from tests.lb.helpers import pem_pair, register_appliance

from .conftest import ADMIN_PROJECT

LB = "/v1/network/lb/"


@pytest.fixture(scope="module", autouse=True)
def own_node(real_api):
    return register_appliance(real_api.store)


def ok(result):
    assert result.code == 0, result.stderr
    return result.json()


def hw_node(cli, name):
    return ok(cli("--json", "create", "compute/nodes", f"name={name}",
                  f"project_id={ADMIN_PROJECT}", "node_type=HW", "cores:=1", "ram:=1024"))


def test_a_whole_lb_by_names(logged_in, tmp_path):
    name = f"web-{uuid.uuid4().hex[:6]}"
    lb = ok(logged_in("--json", "lb", "add", "-n", name, "-p", ADMIN_PROJECT))
    assert lb["type"] == {"kind": "core_agent"} and lb["status"] == "NEW"
    assert logged_in.transport.to(LB)[-1].body == {"name": name, "project_id": ADMIN_PROJECT}
    pool = ok(logged_in("--json", "lb", "pools", "add", name, "-n", "app",
                        "--host", "10.0.0.5:8080", "--host", "10.0.0.6:8080:3"))
    assert pool["endpoints"] == [
        {"kind": "host", "host": "10.0.0.5", "port": 8080, "weight": 1},
        {"kind": "host", "host": "10.0.0.6", "port": 8080, "weight": 3}]
    vhost = ok(logged_in("--json", "lb", "vhosts", "add", name, "-n", "www",
                         "--domain", "www.example.test", "--port", "8080"))
    assert (vhost["protocol"], vhost["port"], vhost["domains"]) == \
        ("http", 8080, ["www.example.test"])
    route = ok(logged_in("--json", "lb", "routes", "add", name, "www", "--pool", "app",
                         "--value", "/api/", "--allowed-ip", "10.0.0.0/8"))
    assert route["condition"]["actions"] == [{"kind": "backend", "pool": pool["uuid"],
                                              "protocol": {"kind": "http"}}]
    assert route["condition"]["value"] == "/api/"
    assert route["condition"]["allowed_ips"] == ["10.0.0.0/8"]
    listed = logged_in("lb", "routes", "list", name, "www")
    assert listed.code == 0 and route["uuid"] in listed.stdout
    off = ok(logged_in("--json", "lb", "routes", "update", name, "www", route["uuid"],
                       "--disabled"))
    assert off["enabled"] is False and off["condition"] == route["condition"]
    info = ok(logged_in("--json", "lb", "info", name))
    assert [v["uuid"] for v in info["vhosts"]] == [vhost["uuid"]]
    assert [r["uuid"] for r in info["vhosts"][0]["routes"]] == [route["uuid"]]
    assert [p["uuid"] for p in info["backend_pools"]] == [pool["uuid"]]
    view = logged_in("lb", "info", name)        # for people: a view, not raw JSON
    assert view.code == 0 and view.stdout.startswith(f"load balancer {name}  "), view.stdout
    assert "  www: http port 8080  www.example.test\n" in view.stdout
    assert f"    route {route['uuid']}: prefix /api/ -> app (http), from 10.0.0.0/8 " \
        "(disabled)\n" in view.stdout
    assert "  app: 10.0.0.5:8080 weight 1, 10.0.0.6:8080 weight 3\n" in view.stdout
    shown = ok(logged_in("--json", "lb", "show", name))
    assert shown["status"] == "IN_PROGRESS" and shown["ipsv4"] == ["192.0.2.10"]
    # the pool is in use: the API's refusal comes through
    refused = logged_in("lb", "pools", "delete", name, "app")
    assert refused.code == 1 and "Backend pool in use" in refused.stderr
    assert logged_in("lb", "delete", name).code == 0
    assert logged_in("lb", "show", lb["uuid"]).code == 1


def test_types_and_updates(logged_in):
    node = hw_node(logged_in, f"n-{uuid.uuid4().hex[:6]}")
    lb = ok(logged_in("--json", "lb", "add", "-n", f"x-{uuid.uuid4().hex[:6]}",
                      "-p", ADMIN_PROJECT, "--node", node["name"]))
    assert lb["type"] == {"kind": "external_node", "external_node": node["uuid"]}
    moved = ok(logged_in("--json", "lb", "update", lb["uuid"], "--type", "core_agent"))
    assert moved["type"] == {"kind": "core_agent"}
    bad = logged_in("lb", "update", lb["uuid"], "--type", "core", "--node", node["name"])
    assert bad.code != 0 and "--node" in bad.stderr
    nothing = logged_in("lb", "update", lb["uuid"])
    assert nothing.code != 0 and "nothing to update" in nothing.stderr


def test_https_vhost_from_files_and_l4_routes(logged_in, tmp_path):
    node = hw_node(logged_in, f"n-{uuid.uuid4().hex[:6]}")
    name = f"t-{uuid.uuid4().hex[:6]}"
    ok(logged_in("--json", "lb", "add", "-n", name, "-p", ADMIN_PROJECT, "--type",
                 "external_node", "--node", node["uuid"]))
    crt, key = pem_pair("secure.example.test")
    (tmp_path / "crt.pem").write_text(crt)
    (tmp_path / "key.pem").write_text(key)
    vhost = ok(logged_in("--json", "lb", "vhosts", "add", name, "--protocol", "https",
                         "--port", "8443", "--domain", "secure.example.test", "--cert",
                         str(tmp_path / "crt.pem"), "--key", str(tmp_path / "key.pem"),
                         "--redirect-http"))
    assert vhost["cert"] == {"kind": "raw", "crt": crt, "key": key}
    # without --key, --cert (an alias of --certificate) names a certificate record
    record = logged_in("lb", "vhosts", "add", name, "--protocol", "https", "--port", "9443",
                       "--domain", "other.example.test", "--cert", "no-such-cert")
    assert record.code == 1 and "no name 'no-such-cert' in /v1/secret/certificates/" in \
        record.stderr
    assert vhost["redirect_http"] is True
    half = logged_in("lb", "vhosts", "add", name, "--protocol", "https", "--domain", "a.b",
                     "--cert", str(tmp_path / "crt.pem"))
    assert half.code != 0 and "--cert and --key go together" in half.stderr
    pool = ok(logged_in("--json", "lb", "backend-pools", "add", name, "-n", "db",
                        "--node", f"{node['name']}:5432"))
    assert pool["endpoints"] == [{"kind": "node", "node": node["uuid"], "port": 5432,
                                  "weight": 1}]
    tcp = ok(logged_in("--json", "lb", "vhosts", "add", name, "-n", "pg", "--protocol", "tcp",
                       "--port", "5432"))
    route = ok(logged_in("--json", "lb", "routes", "add", name, "pg", "--pool", "db",
                         "--kind", "raw"))
    assert route["condition"]["actions"] == [{"kind": "backend", "pool": pool["uuid"]}]
    wrong = logged_in("lb", "routes", "add", name, tcp["uuid"], "--pool", "db")
    assert wrong.code == 1 and "takes only raw routes" in wrong.stderr
    bad = logged_in("lb", "pools", "add", name, "--host", "10.0.0.1")
    assert bad.code != 0 and "NAME:PORT" in bad.stderr


def test_help_names_the_collections(logged_in):
    helped = logged_in("lb", "--help")
    assert helped.code == 0
    for word in ("vhosts", "routes", "pools", "info", "appliance lb routes add"):
        assert word in helped.stdout
    routes = logged_in("lb", "routes", "add", "--help")
    assert routes.code == 0 and "--pool" in routes.stdout and "VHOST" in routes.stdout
