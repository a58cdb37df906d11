"""The address rule on LB pools (issue 25: a project LB's pool `127.0.0.1:<api port>`
exposed the plain-HTTP API). A project owner's `host` endpoint must be a host of the
project's own networks, or of an outside network the admin's setting allows; everything
else is a 400 that changes nothing. Platform callers may name anything. The producer
checks again when it renders: an address may have changed hands since."""

import logging
import os

import pytest

from appliance.agent.targets import View
from appliance.lb import targets
from appliance.network import networks
from tests.apiserver import ApiServer
from tests.compute.conftest import Member, refused
from tests.conftest import ADMIN_PASSWORD
from tests.lb.conftest import LB_IMAGE
from tests.lb.conftest import server  # noqa: F401 (the LB API with an appliance node)
from tests.lb.nginxnode import backends, get, node, one_route  # noqa: F401 (fixtures)
from tests.lb.helpers import (APPLIANCE_IP, make_lb, make_route, make_vhost, pools,
                              prefix, register_appliance)

CORE = {"kind": "core"}


def host(address, port=8080):
    return {"kind": "host", "host": address, "port": port}


def own_address(net, last=20):
    return net["cidr"].rsplit(".", 1)[0] + f".{last}"


@pytest.fixture(scope="module")
def admin(server):  # noqa: F811
    return server.client(server.login("admin", ADMIN_PASSWORD))


@pytest.fixture(scope="module")
def world(server, admin):  # noqa: F811
    owner, other = Member(server, admin), Member(server, admin)
    mine = networks.default_of_project(server.store, server.settings, owner.project)
    theirs = networks.default_of_project(server.store, server.settings, other.project)
    lb = make_lb(owner.client, project=owner.project, type=CORE)
    return {"owner": owner, "other": other, "mine": mine, "theirs": theirs, "lb": lb}


def test_an_own_network_address_is_allowed(world):
    owner, lb = world["owner"], world["lb"]
    resp = owner.client.post(pools(lb), {"endpoints": [host(own_address(world["mine"]))]})
    assert resp.status == 201, resp
    assert resp.json["endpoints"][0]["host"] == own_address(world["mine"])
    assert "platform_endpoints" not in resp.json


@pytest.mark.parametrize("case", [
    "loopback", "loopback6", "mapped", "link_local", "gateway", "dns", "appliance_node",
    "other_project", "platform_network", "outside", "name", "broadcast", "multicast"])
def test_a_project_owner_cannot_point_a_pool_elsewhere(server, world, case):  # noqa: F811
    mine, theirs = world["mine"], world["theirs"]
    address, word = {
        "loopback": ("127.0.0.1", "loopback"),
        "loopback6": ("::1", "loopback"),
        "mapped": ("::ffff:127.0.0.1", "loopback"),
        "link_local": ("169.254.169.254", "link-local"),
        "gateway": (mine["gateway"], "appliance's own address"),
        "dns": (mine["dns"], "appliance's own address"),
        "appliance_node": (APPLIANCE_IP, "platform node"),
        "other_project": (own_address(theirs), "another project's network"),
        "platform_network": ("10.20.0.50", "platform's network"),
        "outside": ("198.51.100.7", "outside every network"),
        "name": ("backend.example.test", "is a name"),
        "broadcast": (own_address(mine, 255), "not a host address"),
        "multicast": ("224.0.0.1", "multicast"),
    }[case]
    owner, lb = world["owner"], world["lb"]
    before = owner.client.get(pools(lb)).json
    message = refused(owner.client.post(pools(lb), {"endpoints": [
        host(own_address(mine, 21)), host(address)]}), 400)
    assert "endpoints.1.host" in message and word in message, message
    assert owner.client.get(pools(lb)).json == before           # nothing changed
    # an update to it is refused as well, and leaves the pool as it was
    pool = before[0] if before else owner.client.post(pools(lb), {"endpoints": [
        host(own_address(mine))]}).json
    message = refused(owner.client.put(f"{pools(lb)}/{pool['uuid']}", {"endpoints": [
        host(address)]}), 400)
    assert word in message
    assert owner.client.get(f"{pools(lb)}/{pool['uuid']}").json["endpoints"] == \
        pool["endpoints"]


def test_the_api_port_on_loopback_is_not_reachable_through_a_project_lb(server, world):  # noqa: F811,E501
    """The attack of the issue: a pool at the API's own plain-HTTP port."""
    owner, lb = world["owner"], world["lb"]
    message = refused(owner.client.post(pools(lb), {"endpoints": [
        host("127.0.0.1", server.settings["api_port"])]}), 400)
    assert "loopback" in message


def test_an_admin_may_name_any_address(admin, world):
    lb = world["lb"]
    resp = admin.post(pools(lb), {"endpoints": [host("127.0.0.1"),
                                                host("backend.example.test")]})
    assert resp.status == 201, resp


def test_node_endpoints_must_be_the_lb_projects(server, admin, world):  # noqa: F811
    from tests.lb.helpers import hw_node
    theirs = hw_node(admin, project=world["other"].project)
    message = refused(world["owner"].client.post(pools(world["lb"]), {"endpoints": [
        {"kind": "node", "node": theirs["uuid"], "port": 80}]}), 400)
    assert "endpoints.0.node" in message


def test_the_admin_setting_allows_an_outside_network_and_nothing_more(tmp_path):
    srv = ApiServer(os.path.join(str(tmp_path), "state"), ADMIN_PASSWORD, lb_image=LB_IMAGE,
                    allowed_outside_networks="198.51.100.0/24,10.0.0.0/8").start()
    try:
        register_appliance(srv.store)
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        owner, other = Member(srv, admin), Member(srv, admin)
        mine = networks.default_of_project(srv.store, srv.settings, owner.project)
        theirs = networks.default_of_project(srv.store, srv.settings, other.project)
        lb = make_lb(owner.client, project=owner.project, type=CORE)
        resp = owner.client.post(pools(lb), {"endpoints": [host("198.51.100.7")]})
        assert resp.status == 201, resp
        # 10.0.0.0/8 covers the other tenants' and the platform's networks and the
        # appliance's addresses on its networks: those stay refused
        for address, word in ((own_address(theirs), "another project's network"),
                              ("10.20.0.50", "platform's network"),
                              (mine["gateway"], "appliance's own address"),
                              ("127.0.0.1", "loopback")):
            message = refused(owner.client.post(pools(lb), {"endpoints": [
                host(address)]}), 400)
            assert word in message, message
    finally:
        srv.stop()


def test_the_producer_checks_again_and_leaves_a_refused_endpoint_out(server, world,  # noqa: F811,E501
                                                                      caplog):
    """The project's network is deleted and its cidr goes to another project: the pool
    written when the address was the owner's no longer reaches it."""
    store, settings = server.store, server.settings
    owner = world["owner"]
    probe = Member(server, server.client(server.login("admin", ADMIN_PASSWORD)))
    net = networks.create(store, settings, {"project_id": probe.project, "name": "moving",
                                            "description": ""})
    lb = make_lb(probe.client, project=probe.project, type=CORE)
    moving = own_address(net, 30)
    pool = probe.client.post(pools(lb), {"endpoints": [host(moving)]}).json
    assert pool["endpoints"][0]["host"] == moving
    admin_pool = server.client(server.login("admin", ADMIN_PASSWORD)).post(
        pools(lb), {"endpoints": [host("127.0.0.1", 9000)]}).json
    vhost = make_vhost(probe.client, lb)
    make_route(probe.client, lb, vhost, prefix(pool))
    make_route(probe.client, lb, vhost, prefix(admin_pool, "/admin/"))

    def value():
        return targets.value(View(store, settings=settings), store.collection(
            "network_lb").get(lb["uuid"]))
    before = value()
    assert before["pools"][pool["uuid"]]["endpoints"] == [
        {"host": moving, "port": 8080, "weight": 1}]
    assert "refused" not in before

    store.collection("network_networks").delete(net["uuid"])
    networks.create(store, settings, {"project_id": owner.project, "name": "taken",
                                      "description": "", "cidr": net["cidr"]})
    with caplog.at_level(logging.WARNING, logger="appliance.lb.targets"):
        after = value()
    assert after["pools"][pool["uuid"]]["endpoints"] == []
    # the platform's endpoint is the platform's choice: kept
    assert after["pools"][admin_pool["uuid"]]["endpoints"] == [
        {"host": "127.0.0.1", "port": 9000, "weight": 1}]
    assert len(after["refused"]) == 1
    assert moving in after["refused"][0] and "another project's network" in \
        after["refused"][0]
    assert any(moving in r.getMessage() for r in caplog.records)


def test_the_node_serves_the_rest_and_reports_what_was_left_out(node, backends):  # noqa: F811
    """The data plane of the recheck: the producer left an endpoint out and said why;
    the node serves the endpoints that passed, and the LB is ERROR with the reason."""
    good = backends("good")
    value, port, pool_uuid = one_route(node, good)
    value["refused"] = [f"pool {pool_uuid}: endpoint 10.32.0.30:8080 left out: 10.32.0.30 "
                        "is in another project's network: no project may reach it"]
    result = node.apply(value)
    assert result["status"] == "ERROR"
    assert "10.32.0.30:8080 left out" in result["reason"]
    assert get(node.address, port, "/x")[2] == b"good /x"
