"""`client_networks` end to end on a real PostgreSQL (Debian's postgresql-15) on loopback:
the API field, the producer's item in a real agent's payload, the real node driver
(tests/sqldb/pgnode.py). A change decides who may log in, and PostgreSQL is reloaded, not
restarted: the same postmaster serves before and after.

psql's source address is always 127.0.0.1 here (libpq binds none; machine-facts), so the
closed list is a network without 127.0.0.1 (127.0.0.2/32) and the open one 127.0.0.0/8."""

import pytest

from appliance.sqldb.reconcile import Planner
from appliance.sqldb.versions import SEED_UUID
from tests.agent.conftest import agent_token, enroll
from tests.compute.conftest import created
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT

from . import pgnode
from .pgnode import Node, free_port, psql

base = pgnode.base

ADDRESS = "127.0.0.46"
INSTANCES = "/v1/sqldb/instances"
PASSWORD = "alice-password-1"


@pytest.fixture(scope="module")
def admin(server):
    return server.client(server.login("admin", ADMIN_PASSWORD))


@pytest.fixture(scope="module")
def world(server, admin, base):
    server.settings["sqldb_port"] = free_port(ADDRESS)
    node_record = created(admin.post("/v1/compute/nodes", {
        "name": "pg-hw", "project_id": ADMIN_PROJECT, "cores": 1, "ram": 1024,
        "node_type": "HW", "address": ADDRESS}))
    instance = created(admin.post(INSTANCES, {
        "name": "reach", "project_id": ADMIN_PROJECT, "version": SEED_UUID,
        "client_networks": ["127.0.0.2/32"],
        "placement": {"kind": "nodes", "nodes": [node_record["uuid"]]}}))
    user = created(admin.post(f"{INSTANCES}/{instance['uuid']}/users",
                              {"name": "alice", "password": PASSWORD}))
    created(admin.post(f"{INSTANCES}/{instance['uuid']}/databases",
                       {"name": "shop", "owner": user["uuid"]}))
    Planner(server.store, server.settings).pass_once()
    cred = enroll(server, admin, node_record["uuid"])
    agent = server.client(agent_token(server, cred))
    node = Node(base, ADDRESS)
    node.uuid = node_record["uuid"]          # the driver serves the API's node
    node.name = "n" + node.uuid.replace("-", "")

    def item():
        payload = agent.get(f"/v1/ua/agents/{cred['agent']}/payload").json
        (found,) = [i for i in payload["resources"] if i["kind"] == "sqldb"]
        return found

    yield node, instance, item
    node.remove(item())


def login(port):
    return psql(ADDRESS, port, "alice", PASSWORD, "SELECT current_user", db="shop")


def test_a_change_of_client_networks_applies_without_a_restart(server, admin, world):
    node, instance, item = world
    port = server.settings["sqldb_port"]
    first = item()
    assert first["value"]["hba"] == ["127.0.0.2/32"]
    assert first["value"]["self"]["host"] == ADDRESS        # the HW node's address
    assert node.apply(first)["status"] == "ACTIVE"
    code, out = login(port)
    assert code != 0 and 'no pg_hba.conf entry for host "127.0.0.1"' in out, out
    postmaster = node.postmaster(instance["uuid"], port)

    changed = admin.put(f"{INSTANCES}/{instance['uuid']}",
                        {"client_networks": ["127.0.0.0/8"]})
    assert changed.status == 200 and changed.json["status"] == "IN_PROGRESS"
    second = item()
    assert second["value"]["hba"] == ["127.0.0.0/8"] and second["hash"] != first["hash"]
    assert node.apply(second)["status"] == "ACTIVE"
    assert login(port) == (0, "alice")
    assert node.postmaster(instance["uuid"], port) == postmaster      # reloaded, not restarted

    # back to the default (the admin project has no network: the node's own address
    # only), which psql's 127.0.0.1 is not
    assert admin.put(f"{INSTANCES}/{instance['uuid']}",
                     {"client_networks": None}).status == 200
    third = item()
    assert third["value"]["hba"] == [f"{ADDRESS}/32"]
    assert node.apply(third)["status"] == "ACTIVE"
    code, out = login(port)
    assert code != 0 and "no pg_hba.conf entry" in out, out
    assert node.postmaster(instance["uuid"], port) == postmaster
