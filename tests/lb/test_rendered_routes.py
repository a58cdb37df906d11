"""GET /v1/network/lb/<uuid>/actions/routes: what nginx gets for an LB (the producer's
value and the node driver's renderer), on the real API, for callers that may read the LB;
no private key ever in the answer."""

import re

import pytest

from tests.compute.conftest import Member, refused
from tests.iam.helpers import bind, make_user

from .helpers import (LB, external, hw_node, make_lb, make_pool, make_route, make_vhost,
                      prefix, raw_cert, set_address)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """conftest's server, with 10.0.0.0/24 open to projects' backends (the address rule
    is not what these tests are about: one node outside it shows its refusal)."""
    from tests.apiserver import ApiServer
    from tests.conftest import ADMIN_PASSWORD

    from .conftest import LB_IMAGE
    from .helpers import register_appliance
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    lb_image=LB_IMAGE, allowed_outside_networks="10.0.0.0/24").start()
    register_appliance(srv.store)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def admin(server):
    from tests.conftest import ADMIN_PASSWORD
    return server.client(server.login("admin", ADMIN_PASSWORD))


@pytest.fixture(scope="module")
def world(server, admin):
    owner = Member(server, admin)
    uid, name, password = make_user(admin)
    bind(admin, uid, "reader", owner.project)
    reader = server.client(server.login(name, password, scope=f"project:{owner.project}"))
    other = Member(server, admin)
    node = hw_node(owner.client, project=owner.project)
    lb = make_lb(owner.client, project=owner.project, type=external(node))
    # backends: the project's own nodes (a host address must be in one of its networks)
    web, app, away = (hw_node(owner.client, project=owner.project) for _ in range(3))
    set_address(server.store, web["uuid"], "10.0.0.5")
    set_address(server.store, app["uuid"], "10.0.0.6")
    set_address(server.store, away["uuid"], "10.9.9.9")
    pool = make_pool(owner.client, lb, [{"kind": "node", "node": web["uuid"], "port": 8080},
                                        {"kind": "node", "node": away["uuid"], "port": 80}])
    api_pool = make_pool(owner.client, lb, [{"kind": "node", "node": app["uuid"],
                                             "port": 9000}])
    vhost = make_vhost(owner.client, lb, domains=["shop.example.test"])
    root = make_route(owner.client, lb, vhost, prefix(pool))
    api = make_route(owner.client, lb, vhost, prefix(api_pool, "/api/"))
    cert = raw_cert("tls.example.test")
    tls = make_vhost(owner.client, lb, protocol="https", domains=["tls.example.test"],
                     cert=cert)
    make_route(owner.client, lb, tls, prefix(pool))
    return {"owner": owner.client, "reader": reader, "other": other.client,
            "admin": admin, "lb": lb, "pool": pool, "api_pool": api_pool, "vhost": vhost,
            "root": root, "api": api, "tls": tls, "key": cert["key"]}


def routes_of(client, lb):
    return client.get(f"{LB}/{lb['uuid']}/actions/routes")


def test_routes_as_data_and_nginx_text(world):
    resp = routes_of(world["owner"], world["lb"])
    assert resp.status == 200, resp
    body = resp.json
    assert body["lb"] == world["lb"]["uuid"] and body["render_error"] is None
    # the node outside the project's reach is left out, and said so
    assert len(body["refused"]) == 1 and "10.9.9.9:80 left out" in body["refused"][0]
    plain = [r for r in body["routes"] if r["vhost"] == world["vhost"]["uuid"]]
    assert [(r["match"], r["value"], r["route"]) for r in plain] == [
        ("prefix", "/", world["root"]["uuid"]), ("prefix", "/api/", world["api"]["uuid"])]
    assert plain[1]["domains"] == ["shop.example.test"]
    assert plain[1]["backends"] == [{"pool": world["api_pool"]["uuid"], "endpoints": [
        {"host": "10.0.0.6", "port": 9000, "weight": 1}]}]
    http = body["nginx"]["http"]
    assert re.search(r"server_name [^;]*shop\.example\.test", http), http
    assert "server 10.0.0.6:9000" in http and re.search(r"location [^{]*/api/", http), http
    assert {v["uuid"]: v["tls"] for v in body["vhosts"]} == {
        world["vhost"]["uuid"]: False, world["tls"]["uuid"]: True}


def test_no_private_key_is_shown(world):
    raw = routes_of(world["admin"], world["lb"]).raw.decode()
    body = world["key"].split("-----")[2].strip().splitlines()[0]
    assert body not in raw and "PRIVATE KEY" not in raw


@pytest.mark.parametrize("who,status", [("owner", 200), ("reader", 200), ("admin", 200),
                                        ("other", 404)])
def test_who_may_read_it(world, who, status):
    resp = routes_of(world[who], world["lb"])
    assert resp.status == status, resp
    if status != 200:
        assert resp.json["type"] == "NotFound" and "10.0.0.5" not in resp.raw.decode()


def test_unknown_lb_is_404(world):
    refused(routes_of(world["owner"], {"uuid": "00000000-0000-0000-0000-0000000000bb"}), 404)


def test_a_pending_certificate_says_so(server, world):
    from .helpers import certificate_record
    record = certificate_record(server.store, project=world["lb"]["project_id"],
                                issued=False)
    lb = make_lb(world["owner"], project=world["lb"]["project_id"],
                 type=external(hw_node(world["owner"], project=world["lb"]["project_id"])))
    make_vhost(world["owner"], lb, protocol="https", domains=["a.example.test"],
               cert={"kind": "certificate", "certificate": record["uuid"]})
    body = routes_of(world["owner"], lb).json
    assert body["unavailable"] == f"waiting for certificate {record['uuid']}"
    assert body["nginx"] is None and body["routes"] == []


def test_openapi_documents_it(server):
    op = server.client().get("/v1/openapi.json").json["paths"][
        "/v1/network/lb/{uuid}/actions/routes"]["get"]
    assert op["x-permission"] == "network.lb.read"
