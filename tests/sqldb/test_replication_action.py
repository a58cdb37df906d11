"""GET /v1/sqldb/instances/<uuid>/actions/replication on the real API: the connection
(host, port, a URI without password) and the replication state read from the members'
reports (ua_resources rows, as their agents store them; written here directly because no
PostgreSQL runs in this test), for callers that may read the instance."""

import pytest

from appliance.sqldb.members import item_uuid
from tests.compute.conftest import Member, refused
from tests.iam.helpers import bind, make_user as make_iam_user

from .helpers import INSTANCES, databases, make_instance, make_user


@pytest.fixture(scope="module")
def world(server, admin):
    owner, other = Member(server, admin), Member(server, admin)
    uid, name, password = make_iam_user(admin)
    bind(admin, uid, "reader", owner.project)
    reader = server.client(server.login(name, password, scope=f"project:{owner.project}"))
    instance = make_instance(admin, project=owner.project, nodes_number=2,
                             sync_replica_number=1)
    user = make_user(admin, instance, name="shop")
    made = admin.post(databases(instance), {"name": "orders", "owner": user["uuid"]})
    assert made.status == 201, made
    store = server.store
    nodes = []
    for i, lsn in enumerate((5000, 4200)):
        node = store.collection("compute_nodes").insert({
            "name": f"{instance['name']}-{i}", "project_id": owner.project,
            "node_set": instance["uuid"], "default_network": {"ipv4": f"10.7.0.{i + 1}"}})
        store.collection("ua_resources").insert({
            "uuid": item_uuid(node["uuid"], instance["uuid"]), "node": node["uuid"],
            "kind": "sqldb", "master": instance["uuid"],
            "value": {"running": True, "lsn_int": lsn}})
        nodes.append(node)
    store.collection("sqldb_instances").update(instance["uuid"], {
        "primary": nodes[0]["uuid"], "epoch": 1,
        "endpoint": f"{instance['uuid']}.dbaas.test"})
    return {"admin": admin, "owner": owner.client, "reader": reader, "other": other.client,
            "instance": instance, "nodes": nodes}


def replication_of(client, instance):
    return client.get(f"{INSTANCES}/{instance['uuid']}/actions/replication")


def test_connection_and_lag(world):
    resp = replication_of(world["owner"], world["instance"])
    assert resp.status == 200, resp
    body = resp.json
    instance, (primary, replica) = world["instance"], world["nodes"]
    assert body["host"] == f"{instance['uuid']}.dbaas.test" and body["port"] == 5432
    assert body["uri"] == f"postgresql://shop@{instance['uuid']}.dbaas.test:5432/orders"
    assert body["primary"] == primary["uuid"] and body["epoch"] == 1
    members = {m["node"]: m for m in body["members"]}
    assert members[primary["uuid"]]["role"] == "primary"
    assert members[primary["uuid"]]["lag_bytes"] == 0
    assert members[replica["uuid"]]["role"] == "replica"
    assert members[replica["uuid"]]["lag_bytes"] == 800
    assert members[replica["uuid"]]["fresh"] is True
    assert members[replica["uuid"]]["address"] == "10.7.0.2"
    assert "password" not in resp.raw.decode().lower().replace("without password", "")


@pytest.mark.parametrize("who,status", [("owner", 200), ("reader", 200), ("admin", 200),
                                        ("other", 404)])
def test_who_may_read_it(world, who, status):
    resp = replication_of(world[who], world["instance"])
    assert resp.status == status, resp
    if status == 404:
        assert resp.json["type"] == "NotFound" and "10.7.0" not in resp.raw.decode()


def test_unknown_instance_is_404(world):
    refused(replication_of(world["owner"], {"uuid": "00000000-0000-0000-0000-0000000000cc"}),
            404)


def test_openapi_documents_it(server):
    op = server.client().get("/v1/openapi.json").json["paths"][
        f"{INSTANCES}/{{uuid}}/actions/replication"]["get"]
    assert op["x-permission"] == "sqldb.instance.read"


def test_a_report_without_a_number_shows_no_lag_and_no_error(server, world):
    """An agent's report whose WAL position is no number (a broken or hostile agent) is
    no reason for the read to fail: the lag is shown unknown, for its member and, when it
    is the primary's, for every member."""
    reports = server.store.collection("ua_resources")
    primary, replica = world["nodes"]
    key = item_uuid(primary["uuid"], world["instance"]["uuid"])
    before = reports.get(key)
    reports.update(key, {"value": {"running": True, "lsn_int": "not a number"}})
    try:
        resp = replication_of(world["owner"], world["instance"])
        assert resp.status == 200, resp
        members = {m["node"]: m for m in resp.json["members"]}
        assert members[primary["uuid"]]["lag_bytes"] is None
        assert members[replica["uuid"]]["lag_bytes"] is None
        assert members[replica["uuid"]]["fresh"] is True
    finally:
        reports.update(key, {"value": before["value"]})
