"""The producer and the status through the real API: an agent's payload carries the sqldb
item, its report of kind sqldb (not a master kind of the generic status step) is accepted
and stored, and the daemon's pass turns it into the instance's and the user's status."""

import pytest

from appliance.sqldb.members import item_uuid
from appliance.sqldb.reconcile import Planner
from appliance.sqldb.versions import SEED_UUID
from tests.agent.conftest import agent_token, enroll
from tests.compute.conftest import created
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT
from tests.lb.helpers import hw_node

INSTANCES = "/v1/sqldb/instances"


@pytest.fixture(scope="module")
def admin(server):
    return server.client(server.login("admin", ADMIN_PASSWORD))


def test_payload_report_and_status(server, admin):
    node = hw_node(admin, ipv4="127.0.0.31", store=server.store)
    instance = created(admin.post(INSTANCES, {
        "name": "orders", "project_id": ADMIN_PROJECT, "version": SEED_UUID, "cpu": 1,
        "ram": 512, "disk_size": 8, "nodes_number": 1,
        "placement": {"kind": "nodes", "nodes": [node["uuid"]]}}))
    created(admin.post(f"{INSTANCES}/{instance['uuid']}/users",
                       {"name": "alice", "password": "password-1"}))
    planner = Planner(server.store, server.settings)
    planner.pass_once()
    cred = enroll(server, admin, node["uuid"])
    agent = server.client(agent_token(server, cred))
    payload = agent.get(f"/v1/ua/agents/{cred['agent']}/payload").json
    (item,) = [i for i in payload["resources"] if i["kind"] == "sqldb"]
    value = item["value"]
    assert item["uuid"] == item_uuid(node["uuid"], instance["uuid"])
    assert (value["role"], value["epoch"], value["sync_replica_number"]) == ("primary", 0, 0)
    assert value["self"]["host"] == "127.0.0.31" and value["users"]["alice"].startswith(
        "SCRAM-SHA-256$4096:")
    assert len(value["replication"]["password"]) == 32
    shown = admin.get(f"{INSTANCES}/{instance['uuid']}").json
    assert shown["status"] == "IN_PROGRESS" and shown["primary"] == node["uuid"]
    report = {"uuid": item["uuid"], "kind": "sqldb", "master": instance["uuid"],
              "hash": item["hash"], "status": "ACTIVE", "reason": None, "value": {
                  "epoch": 0, "role": "primary", "running": True, "timeline": 1,
                  "lsn": "0/3000148", "lsn_int": 50331976, "streaming_from": None,
                  "sync_standbys": [], "users": {"alice": "ok"}, "databases": {},
                  "checked_at": "2026-01-01T00:00:00"}}
    resp = agent.post(f"/v1/ua/agents/{cred['agent']}/actions/report/invoke",
                      {"resources": [report], "full": True})
    assert resp.status == 200 and resp.json["stored"] == 1
    row = server.store.collection("ua_resources").get(item["uuid"])
    assert (row["kind"], row["master_kind"], row["value"]["lsn_int"]) == \
        ("sqldb", None, 50331976)
    planner.pass_once()
    shown = admin.get(f"{INSTANCES}/{instance['uuid']}").json
    assert (shown["status"], shown["status_reason"]) == ("ACTIVE", None)
    assert shown["ipsv4"] == ["127.0.0.31"]
    assert shown["endpoint"] == f"{instance['uuid']}.sqldb.appliance.internal"
    assert shown["node_status"][node["uuid"]]["role"] == "primary"
    (user,) = admin.get(f"{INSTANCES}/{instance['uuid']}/users").json
    assert user["status"] == "ACTIVE"
