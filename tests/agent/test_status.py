"""The status step of master resources, alone and in the real status daemon."""

import time
import uuid

from appliance.agent import status
from daemons.status import AgentStatus
from tests.agent import testcap
from tests.agent.conftest import add_file, agent_token, enroll, hw_node

MASTERS = testcap.MASTER_KIND


def report(server, cred, items, states):
    client = server.client(agent_token(server, cred))
    body = {"resources": [{"uuid": i["uuid"], "kind": i["kind"], "master": i["master"],
                           "hash": i["hash"], "status": st, "reason": reason,
                           "value": {"size": 1}} for i, (st, reason) in zip(items, states)]}
    resp = client.post(f"/v1/ua/agents/{cred['agent']}/actions/report/invoke", body)
    assert resp.status == 200, resp


def payload(server, cred):
    client = server.client(agent_token(server, cred))
    return client.get(f"/v1/ua/agents/{cred['agent']}/payload").json["resources"]


def master(server, record):
    return server.store.collection(MASTERS).get(record["uuid"])


def test_aggregate(capserver, capadmin):
    store = capserver.store
    a, b, bare = hw_node(capadmin), hw_node(capadmin), hw_node(capadmin)
    ca, cb = enroll(capserver, capadmin, a["uuid"]), enroll(capserver, capadmin, b["uuid"])
    both = add_file(store, {"kind": "nodes", "nodes": [a["uuid"], b["uuid"]]}, "/etc/f", "x")
    status.aggregate(store, MASTERS)
    record = master(capserver, both)
    assert record["status"] == "IN_PROGRESS" and "waiting" in record["status_reason"]
    assert set(record["node_status"]) == {a["uuid"], b["uuid"]}
    [ia], [ib] = payload(capserver, ca), payload(capserver, cb)
    report(capserver, ca, [ia], [("ACTIVE", None)])
    report(capserver, cb, [ib], [("ERROR", "disk full")])
    status.aggregate(store, MASTERS)
    record = master(capserver, both)
    assert record["status"] == "ERROR"
    assert record["status_reason"] == f"node {b['name']}: disk full"
    assert record["node_status"][a["uuid"]] == {"status": "ACTIVE", "reason": None, "size": 1}
    report(capserver, cb, [ib], [("ACTIVE", None)])
    status.aggregate(store, MASTERS)
    record = master(capserver, both)
    assert (record["status"], record["status_reason"]) == ("ACTIVE", None)
    # nothing changed: nothing written
    assert status.aggregate(store, MASTERS) == 0
    assert master(capserver, both)["revision"] == record["revision"]
    # a new value: IN_PROGRESS until the agents report its hash
    store.collection(MASTERS).update(both["uuid"], {"content": "y"})
    status.aggregate(store, MASTERS)
    assert master(capserver, both)["status"] == "IN_PROGRESS"
    # a node with no agent, a link not ready, a target gone, a set with no member
    no_agent = add_file(store, {"kind": "node", "node": bare["uuid"]}, "/etc/g", "x")
    waiting = add_file(store, {"kind": "node", "node": a["uuid"]}, "/etc/h", None,
                       unavailable="password p has no value yet")
    gone = add_file(store, {"kind": "node", "node": str(uuid.uuid4())}, "/etc/i", "x")
    empty_set = store.collection("compute_sets").insert({"name": "empty"})
    empty = add_file(store, {"kind": "node_set", "node_set": empty_set["uuid"]}, "/etc/j", "x")
    status.aggregate(store, MASTERS)
    assert "no agent" in master(capserver, no_agent)["status_reason"]
    assert master(capserver, waiting)["status_reason"] == \
        f"node {a['name']}: password p has no value yet"
    assert (master(capserver, gone)["status"], master(capserver, gone)["status_reason"]) == \
        ("ERROR", f"target node {gone['target']['node']} not found")
    assert (master(capserver, empty)["status"], master(capserver, empty)["node_status"]) == \
        ("ACTIVE", {})


def test_a_master_without_a_target_keeps_its_own_writer_s_status(capserver, capadmin):
    """An SSH key without a target is the delivery daemon's (the data plane), which runs in
    another process now: the status step must not mark it ACTIVE before its file is
    written, nor undo a failed delivery's ERROR."""
    store = capserver.store
    keys = store.collection("secret_ssh_keys")
    pending = keys.insert({"name": "pending", "status": "NEW", "user": "u"})
    failed = keys.insert({"name": "failed", "status": "ERROR", "status_reason": "disk full",
                          "user": "u"})
    assert status.aggregate(store, "secret_ssh_keys") == 0
    assert keys.get(pending["uuid"]) == pending and keys.get(failed["uuid"]) == failed
    # a target removed: the agents' judgement of it goes, the status stays the delivery's
    node = hw_node(capadmin)
    moved = keys.insert({"name": "moved", "status": "ACTIVE", "user": "u", "target": None,
                         "node_status": {node["uuid"]: {"status": "ACTIVE", "reason": None}}})
    assert status.aggregate(store, "secret_ssh_keys") == 1
    after = keys.get(moved["uuid"])
    assert (after["status"], after["node_status"]) == ("ACTIVE", {})


def test_status_daemon_writes_status_after_a_report(capserver, capadmin):
    node = hw_node(capadmin)
    cred = enroll(capserver, capadmin, node["uuid"])
    record = add_file(capserver.store, {"kind": "node", "node": node["uuid"]}, "/etc/d", "d")
    daemon = AgentStatus(capserver.settings, capserver.store).start()
    try:
        deadline = time.monotonic() + 10
        while master(capserver, record).get("status") != "IN_PROGRESS":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        report(capserver, cred, payload(capserver, cred), [("ACTIVE", None)])
        deadline = time.monotonic() + 10
        while master(capserver, record).get("status") != "ACTIVE":
            assert time.monotonic() < deadline, master(capserver, record)
            time.sleep(0.05)
    finally:
        daemon.stop()
