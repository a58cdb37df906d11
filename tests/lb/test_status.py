"""An LB's status from what its nodes' agents report (real reports through the API, as
tests/agent does), and the payload long poll waking on what an LB item reads."""

import threading
import time

import pytest

from appliance.agent import status
from daemons.status import AgentStatus
from tests.agent.conftest import agent_token, enroll
from tests.compute.conftest import refused
from tests.waiting import eventually

from .helpers import (LB, certificate_record, external, hw_node, make_lb, make_pool,
                      make_route, make_vhost, prefix, set_address, vhosts)

MASTERS = "network_lb"


@pytest.fixture(scope="module")
def admin(server):
    from tests.conftest import ADMIN_PASSWORD
    return server.client(server.login("admin", ADMIN_PASSWORD))


def agent_client(server, cred):
    return server.client(agent_token(server, cred))


def payload(server, cred, **query):
    resp = agent_client(server, cred).get(f"/v1/ua/agents/{cred['agent']}/payload",
                                          query=query)
    assert resp.status == 200, resp
    return resp.json


def lb_items(server, cred):
    return [i for i in payload(server, cred)["resources"] if i["kind"] == "lb"]


def report(server, cred, item, state, reason=None, check=None):
    """What the nginx driver reports (the contract's actual value)."""
    body = {"resources": [{"uuid": item["uuid"], "kind": "lb", "master": item["master"],
                           "hash": item["hash"], "status": state, "reason": reason,
                           "value": {"nginx_check": check,
                                     "applied_at": "2026-11-23T08:00:00Z"}}]}
    resp = agent_client(server, cred).post(
        f"/v1/ua/agents/{cred['agent']}/actions/report/invoke", body)
    assert resp.status == 200, resp


def lb_status(server, lb):
    record = server.store.collection(MASTERS).get(lb["uuid"])
    return record["status"], record["status_reason"]


@pytest.fixture
def placed(server, admin):
    """An LB on an enrolled node, with one route."""
    node = hw_node(admin, ipv4="10.7.0.2", store=server.store)
    cred = enroll(server, admin, node["uuid"])
    lb = make_lb(admin, type=external(node))
    pool = make_pool(admin, lb)
    vhost = make_vhost(admin, lb, port=8080)
    make_route(admin, lb, vhost, prefix(pool))
    return node, cred, lb, vhost


def test_new_in_progress_active_error(server, admin, placed):
    node, cred, lb, vhost = placed
    status.aggregate(server.store, MASTERS)
    state, reason = lb_status(server, lb)
    assert state == "IN_PROGRESS" and "waiting for the node's agent" in reason
    [item] = lb_items(server, cred)
    report(server, cred, item, "ACTIVE", check="syntax is ok")
    status.aggregate(server.store, MASTERS)
    assert lb_status(server, lb) == ("ACTIVE", None)
    shown = admin.get(f"{LB}/{lb['uuid']}").json
    assert shown["node_status"][node["uuid"]] == {
        "status": "ACTIVE", "reason": None, "nginx_check": "syntax is ok",
        "applied_at": "2026-11-23T08:00:00Z"}
    # a change: IN_PROGRESS at once (the API), and until the agent applied the new hash
    assert admin.put(f"{vhosts(lb)}/{vhost['uuid']}", {"port": 8081}).status == 200
    assert lb_status(server, lb) == ("IN_PROGRESS", None)
    status.aggregate(server.store, MASTERS)
    assert lb_status(server, lb)[0] == "IN_PROGRESS"
    [item] = lb_items(server, cred)
    message = 'nginx: [emerg] unknown directive "proxy_pas" in /etc/nginx/lb.conf:12'
    report(server, cred, item, "ERROR", reason=message, check=message)
    status.aggregate(server.store, MASTERS)
    assert lb_status(server, lb) == ("ERROR", f"node {node['name']}: {message}")
    report(server, cred, item, "ACTIVE")
    status.aggregate(server.store, MASTERS)
    assert lb_status(server, lb) == ("ACTIVE", None)


def test_a_node_without_an_agent(server, admin):
    lb = make_lb(admin, type=external(hw_node(admin)))
    status.aggregate(server.store, MASTERS)
    assert "no agent is enrolled" in lb_status(server, lb)[1]


def test_an_lb_waiting_for_its_certificate(server, admin, placed):
    node, cred, lb, _vhost = placed
    pending = certificate_record(server.store, issued=False)
    make_vhost(admin, lb, "https", port=8443, cert={"kind": "certificate",
                                                    "certificate": pending["uuid"]})
    status.aggregate(server.store, MASTERS)
    assert lb_status(server, lb) == (
        "IN_PROGRESS", f"node {node['name']}: waiting for certificate {pending['uuid']}")


def test_lbs_that_are_on_no_node(server, admin):
    core = make_lb(admin, type={"kind": "core"})
    node = hw_node(admin)
    gone = make_lb(admin, type=external(node))
    # the API keeps a node an LB runs on (docs/api.md "In use"); one that disappears
    # anyway (lost from the store) leaves the LB in ERROR, saying so
    assert admin.delete(f"/v1/compute/nodes/{node['uuid']}").status == 409
    server.store.collection("compute_nodes").delete(node["uuid"])
    status.aggregate(server.store, MASTERS)
    state, reason = lb_status(server, core)
    assert state == "IN_PROGRESS" and f"lbaas-{core['name']}" in reason
    assert lb_status(server, gone) == (
        "ERROR", f"type external_node: node {node['uuid']} not found")


def test_status_is_never_written_by_a_client(admin, placed):
    _node, _cred, lb, _vhost = placed
    refused(admin.put(f"{LB}/{lb['uuid']}", {"status": "ACTIVE"}), 403)


def test_the_status_daemon_moves_the_lb(server, admin, placed):
    _node, cred, lb, _vhost = placed
    daemon = AgentStatus(server.settings, server.store).start()
    try:
        eventually(lambda: lb_status(server, lb)[0] == "IN_PROGRESS" and
                   lb_status(server, lb)[1] is not None, 10, "the daemon's first judgement")
        [item] = lb_items(server, cred)
        report(server, cred, item, "ACTIVE")
        eventually(lambda: lb_status(server, lb) == ("ACTIVE", None), 10, "ACTIVE")
    finally:
        daemon.stop()


def poll_answer(server, cred, known, change):
    """(answered, payload) of a long poll with hash `known` while `change()` runs once
    the poll waits."""
    hub = server.api.resources["/v1/ua/agents"].hub
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(
        payload(server, cred, hash=known, wait=20)))
    waiter.start()
    eventually(lambda: hub.waiting >= 1, 10, "the poll waits")
    started = time.monotonic()
    change()
    waiter.join(25)
    return time.monotonic() - started, answers[0]


@pytest.mark.parametrize("what", ["vhost", "certificate", "node address"])
def test_the_long_poll_wakes_on_what_the_item_reads(server, admin, placed, what):
    _node, cred, lb, vhost = placed
    backend = hw_node(admin, ipv4="10.7.1.1", store=server.store)
    pool = make_pool(admin, lb, [{"kind": "node", "node": backend["uuid"], "port": 80}])
    make_route(admin, lb, vhost, prefix(pool, "/b/"))
    pending = certificate_record(server.store, issued=False)
    if what == "certificate":
        # the whole item waits for it (value null) until it is issued
        make_vhost(admin, lb, "https", port=8443, cert={"kind": "certificate",
                                                        "certificate": pending["uuid"]})
    known = payload(server, cred)["hash"]
    issued = certificate_record(server.store)
    changes = {
        "vhost": lambda: admin.put(f"{vhosts(lb)}/{vhost['uuid']}", {"port": 8099}),
        # the acme daemon writing the issued chain and key into the record
        "certificate": lambda: issue(server.store, pending, issued),
        "node address": lambda: set_address(server.store, backend["uuid"], "10.7.1.2"),
    }
    took, body = poll_answer(server, cred, known, changes[what])
    assert body["hash"] != known
    # a generous bound: the poll is answered by a store watch (milliseconds when idle),
    # not by its 20 s timeout
    assert took < 10


def issue(store, pending, issued):
    """What the certificate daemon writes once the order is done: the chain, and the key
    sealed for the record (here the key of another issued record)."""
    from appliance.secret.crypto import SecretBox
    box = SecretBox(store)
    key = box.open("secret_certificates", issued["uuid"], "key", issued["key"])
    store.collection("secret_certificates").update(pending["uuid"], {
        "cert": issued["cert"], "key": box.seal("secret_certificates", pending["uuid"],
                                                "key", key)})
