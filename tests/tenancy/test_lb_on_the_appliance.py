"""The attack of issue 25, at the API: a project owner's load balancer ran on the
appliance itself (its default type was core_agent) and bound port 25 with a TCP vhost;
with a pool pointing at the plain-HTTP API on loopback, that exposed the API beyond
loopback. Now a project's LB defaults to its own node set (type core), core_agent is the
platform's, and a project's vhost binds only 80, 443 or a port from 1024 up. Each
refusal changes nothing, and the appliance's node gets no item of a project's LB.
"""

import pytest

from appliance.agent.targets import View
from appliance.lb import placement, targets
from tests.apiserver import ApiServer
from tests.compute.conftest import Member, created, refused
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT
from tests.lb.conftest import LB_IMAGE
from tests.lb.helpers import APPLIANCE_IP, LB, external, hw_node, register_appliance, vhosts


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    lb_image=LB_IMAGE).start()
    srv.appliance_node = register_appliance(srv.store)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def owner(server, admin):
    return Member(server, admin)


def lbs(server):
    kinds = ("network_lb", "network_lb_vhosts", "network_lb_backend_pools")
    return {k: sorted((r["uuid"], r["revision"]) for r in server.store.collection(k).records())
            for k in kinds}


def items_on_the_appliance(server):
    """The LB items the appliance's own node would be sent."""
    node = server.store.collection("compute_nodes").get(server.appliance_node["uuid"])
    return targets.for_node(View(server.store), node)


def test_a_project_lb_without_a_type_runs_on_its_own_set_not_on_the_appliance(server,
                                                                              owner):
    lb = created(owner.client.post(LB, {"name": "edge"}))
    assert lb["type"]["kind"] == "core" and lb["type"]["kind"] != "core_agent"
    assert APPLIANCE_IP not in lb["ipsv4"]
    assert lb["uuid"] not in [i["master"] for i in items_on_the_appliance(server)]


def test_a_project_owner_cannot_make_a_core_agent_lb(server, owner):
    before = lbs(server)
    message = refused(owner.client.post(LB, {"name": "on-the-appliance",
                                             "type": {"kind": "core_agent"}}), 403)
    assert "appliance's own node" in message and "core" in message
    assert lbs(server) == before
    assert items_on_the_appliance(server) == []


@pytest.mark.parametrize("protocol,port", [("tcp", 25), ("tcp", 22), ("udp", 53),
                                           ("tcp", 1023), ("tcp", 1)])
def test_a_project_lb_cannot_bind_a_port_below_1024(server, admin, owner, protocol, port):
    lb = created(owner.client.post(LB, {"type": external(hw_node(admin, owner.project))}))
    before = lbs(server)
    message = refused(owner.client.post(vhosts(lb), {"protocol": protocol, "port": port}),
                      400)
    assert f"port {port}" in message and "1024" in message
    assert lbs(server) == before
    # nor by moving a vhost there, nor when the admin writes the project's LB
    vhost = created(owner.client.post(vhosts(lb), {"protocol": protocol, "port": 8025}))
    before = lbs(server)
    refused(owner.client.put(f"{vhosts(lb)}/{vhost['uuid']}", {"port": port}), 400)
    refused(admin.post(vhosts(lb), {"protocol": protocol, "port": port}), 400)
    assert lbs(server) == before


@pytest.mark.parametrize("protocol,port", [("http", 80), ("tcp", 443), ("tcp", 1024),
                                           ("udp", 65535)])
def test_a_project_lb_binds_80_443_and_from_1024(admin, owner, protocol, port):
    lb = created(owner.client.post(LB, {"type": external(hw_node(admin, owner.project))}))
    body = {"protocol": protocol, "port": port}
    if protocol == "http":
        body["domains"] = ["www.example.test"]
    assert created(owner.client.post(vhosts(lb), body))["port"] == port


def test_the_platform_lb_still_binds_low_ports_and_defaults_to_the_appliance(server, admin):
    lb = created(admin.post(LB, {"project_id": ADMIN_PROJECT}))
    assert lb["type"] == {"kind": "core_agent"} and lb["ipsv4"] == [APPLIANCE_IP]
    assert created(admin.post(vhosts(lb), {"protocol": "tcp", "port": 25}))["port"] == 25
    # the appliance's own ports stay refused
    assert "SSH" in refused(admin.post(vhosts(lb), {"protocol": "tcp", "port": 22}), 409)
    assert lb["uuid"] in [i["master"] for i in items_on_the_appliance(server)]


def test_a_project_core_agent_lb_stored_before_the_fix_reaches_no_node(server, admin,
                                                                       owner):
    """An LB made while the default was core_agent: it stays off the appliance's node
    (ERROR, saying why) until its owner changes its type."""
    lb = created(owner.client.post(LB, {"type": external(hw_node(admin, owner.project))}))
    server.store.collection("network_lb").update(lb["uuid"], {"type": {"kind": "core_agent"}})
    assert lb["uuid"] not in [i["master"] for i in items_on_the_appliance(server)]
    assert owner.client.get(f"{LB}/{lb['uuid']}").json["ipsv4"] == []
    status, reason = placement.unplaced(server.store,
                                        server.store.collection("network_lb").get(lb["uuid"]))
    assert status == "ERROR" and "admin project" in reason
    moved = owner.client.put(f"{LB}/{lb['uuid']}", {"type": {"kind": "core"}})
    assert moved.status == 200 and moved.json["type"]["kind"] == "core"
