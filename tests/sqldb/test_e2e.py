"""Issue 16 end to end, every part real (tests/sqldb/world.py): the API, the sqldb daemon,
our DNS server, three HW nodes each with a real agent process and Debian's PostgreSQL.

One instance of 3 nodes with one synchronous replica goes through its life in file order:
ACTIVE; a user and a database; rows written through the endpoint (a name our DNS server
answers) as that user with SCRAM; the primary's node lost (agent and PostgreSQL killed);
a replica promoted with every committed row; the old node back as a replica (pg_rewind);
a password changed; the instance deleted."""

import os
import time

import pytest
import yaml

from tests.em.conftest import act, element, install

from .world import INSTANCES, PG_BIN, World, eventually, psql

ADDRESSES = ("127.0.0.51", "127.0.0.52", "127.0.0.53")
FAILOVER_SECONDS = 5
USER, DATABASE = "app_user", "app_db"
PASSWORD, NEW_PASSWORD = "first-Pass-8", "second-Pass-9"
ROWS = 50
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                       "pg-cluster-1.0.0.yaml")

pytestmark = pytest.mark.skipif(not os.path.exists(PG_BIN + "/postgres"),
                                reason="Debian's postgresql-15 is not installed")


@pytest.fixture(scope="module")
def world():
    world = World(ADDRESSES, failover_seconds=FAILOVER_SECONDS)
    try:
        yield world.start()
    finally:
        world.stop()


def path_of(instance):
    return f"{INSTANCES}/{instance['uuid']}"


def run_sql(world, host, sql, password=PASSWORD):
    return psql(host, world.port, sql, password, USER, DATABASE)


def rows(world, host, password=PASSWORD):
    done = run_sql(world, host, "SELECT count(*) FROM t", password)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


@pytest.fixture(scope="module")
def instance(world):
    started = time.monotonic()
    made = world.create_instance("orders", world.nodes, sync=1)
    assert made["status"] == "NEW"
    active = world.wait_status(path_of(made), "ACTIVE", "instance ACTIVE")
    print(f"\n3-node instance created -> ACTIVE in {time.monotonic() - started:.1f} s")
    return active


def test_instance_active_with_a_streaming_sync_replica(world, instance):
    assert sorted(instance["ipsv4"]) == sorted(ADDRESSES)
    primary = world.node(instance["primary"])
    assert world.resolve(instance["endpoint"]) == [primary.address]
    report = world.report(primary, instance["uuid"])
    assert report["status"] == "ACTIVE" and report["value"]["role"] == "primary"
    # ANY 1 of the two others: at least one of them is a synchronous standby
    eventually(lambda: world.report(primary, instance["uuid"])["value"]["sync_standbys"],
               "a synchronous standby")
    for node in world.nodes:
        if node is not primary:
            assert world.report(node, instance["uuid"])["value"]["role"] == "replica"


def test_user_and_database_then_rows_through_the_endpoint(world, instance):
    admin, path = world.admin, path_of(instance)
    resp = admin.post(path + "/users", {"name": USER, "password": PASSWORD})
    assert resp.status == 201, resp
    user = resp.json
    assert "password" not in user and "password_hash" not in user
    world.wait_status(f"{path}/users/{user['uuid']}", "ACTIVE", "user ACTIVE")
    resp = admin.post(path + "/databases", {
        "name": DATABASE,
        "owner": f"/v1/types/sqldb/instances/{instance['uuid']}/users/{user['uuid']}"})
    assert resp.status == 201, resp
    world.wait_status(f"{path}/databases/{resp.json['uuid']}", "ACTIVE", "database ACTIVE")
    host = world.resolve(instance["endpoint"])[0]
    done = run_sql(world, host, "CREATE TABLE t (id int PRIMARY KEY)")
    assert done.returncode == 0, done.stderr
    for i in range(ROWS):           # each row committed in its own transaction
        done = run_sql(world, host, f"INSERT INTO t (id) VALUES ({i})")
        assert done.returncode == 0, done.stderr
    assert rows(world, host) == ROWS
    wrong = run_sql(world, host, "SELECT 1", "not-the-password")
    assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr


def test_primary_lost_replica_promoted_with_every_committed_row(world, instance):
    old = world.node(world.instance(instance["uuid"])["primary"])
    lost_at = time.monotonic()
    old.lose()

    def moved():
        got = world.instance(instance["uuid"])
        return got if got["primary"] not in (None, old.uuid) else None
    after = eventually(moved, "a replica promoted", interval=0.05)
    promoted = time.monotonic() - lost_at
    new = world.node(after["primary"])

    def writable():
        # the endpoint moves at the decision; the promotion finishes on the node after it
        host = world.resolve(after["endpoint"])
        if host != [new.address]:
            return None
        done = run_sql(world, new.address, f"INSERT INTO t (id) VALUES ({ROWS})")
        return done.returncode == 0
    eventually(writable, "the endpoint taking writes on the new primary", interval=0.05)
    print(f"\nprimary lost -> replica promoted in {promoted:.1f} s (failover after "
          f"{FAILOVER_SECONDS} s without a heartbeat); the endpoint took a write "
          f"{time.monotonic() - lost_at:.1f} s after the loss")
    assert rows(world, new.address) == ROWS + 1, "a committed row was lost"
    assert after["epoch"] >= 1


def test_old_primary_rejoins_as_a_replica(world, instance):
    old = next(n for n in world.nodes if n.agent.proc.poll() is not None)
    old.agent.start()

    def rejoined():
        report = world.report(old, instance["uuid"]) or {}
        value = report.get("value") or {}
        return report.get("status") == "ACTIVE" and value.get("role") == "replica" \
            and value.get("streaming_from")
    eventually(rejoined, "the old primary streaming as a replica")
    # the row the new primary committed after the failover reached the old one
    eventually(lambda: rows(world, old.address) == ROWS + 1, "the new row on the old primary")
    now = world.wait_status(path_of(instance), "ACTIVE", "instance ACTIVE, every member")
    assert now["primary"] != old.uuid


def test_password_change_refuses_the_old_one(world, instance):
    admin, path = world.admin, path_of(instance)
    user = next(u for u in admin.get(path + "/users").json if u["name"] == USER)
    assert admin.put(f"{path}/users/{user['uuid']}", {"password": NEW_PASSWORD}).status == 200
    world.wait_status(f"{path}/users/{user['uuid']}", "ACTIVE", "the new password applied")
    host = world.resolve(world.instance(instance["uuid"])["endpoint"])[0]
    assert rows(world, host, NEW_PASSWORD) == ROWS + 1
    old = run_sql(world, host, "SELECT 1", PASSWORD)
    assert old.returncode != 0 and "password authentication failed" in old.stderr


def test_delete_removes_the_instance_everywhere(world, instance):
    endpoint = world.instance(instance["uuid"])["endpoint"]
    world.delete_instance(instance)
    assert world.admin.get(path_of(instance)).status == 404
    store = world.api.store
    assert not store.collection("sqldb_users").by("instance", instance["uuid"])
    assert not store.collection("sqldb_databases").by("instance", instance["uuid"])
    eventually(lambda: world.resolve(endpoint) == [], "the endpoint's record removed")


def test_the_example_element_installs_to_active_and_uninstalls(world):
    """examples/pg-cluster-1.0.0.yaml (the 2.9 shape) through the Element Manager, on the
    real data plane: placed on this test's three nodes, and its client config delivered to
    the first one (the example's own client node has no agent here)."""
    with open(EXAMPLE) as f:
        manifest = yaml.safe_load(f)
    resources = manifest["resources"]
    resources["$dbaas.types.sqldb.instances"]["pg"]["placement"] = {
        "kind": "nodes", "nodes": [n.uuid for n in world.nodes]}
    del resources["$core.compute.nodes"]
    config = resources["$core.config.configs"]["client_env"]
    config["target"] = {"kind": "node", "node": world.nodes[0].uuid}
    started = time.monotonic()
    manifest_uuid = install(world.admin, manifest)

    def active():
        got = element(world.admin, "pg_cluster")
        return got if got and got["status"] == "ACTIVE" else None
    try:
        elem = eventually(active, "the element ACTIVE")
    except AssertionError:
        raise AssertionError(f"element: {element(world.admin, 'pg_cluster')}") from None
    print(f"\nthe example element installed -> ACTIVE in {time.monotonic() - started:.1f} s")
    instance = elem["resources"]["types.sqldb.instances.$pg"]["uuid"]
    got = world.instance(instance)
    assert got["status"] == "ACTIVE" and sorted(got["ipsv4"]) == sorted(ADDRESSES)
    # the client config on the node, with the members' addresses and the password that
    # the user logs in with (SCRAM) through the endpoint. An element is ACTIVE once its
    # config is written (only DBaaS records are followed to their data-plane status:
    # appliance/em/builtin.py), so the agent's delivery may come a moment after: a CI run
    # read the file 3.3 s after the install, before it was there
    client_env = world.nodes[0].agent.root + config["path"]
    eventually(lambda: os.path.exists(client_env), "the client config on the first node")
    env = dict(line.split("=", 1) for line in open(client_env).read().split())
    assert sorted(env["PGHOSTS"].split(",")) == sorted(ADDRESSES)
    host = world.resolve(env["PGENDPOINT"])[0]
    done = psql(host, world.port, "SELECT current_user", env["PGPASSWORD"], env["PGUSER"],
                env["PGDATABASE"])
    assert done.returncode == 0 and done.stdout.strip() == "app", done.stderr

    assert act(world.admin, manifest_uuid, "uninstall").status == 200
    eventually(lambda: element(world.admin, "pg_cluster") is None, "the element gone")
    for kind in ("sqldb_instances", "sqldb_users", "sqldb_databases", "config_configs"):
        assert world.api.store.collection(kind).records() == [], kind
    eventually(lambda: not any(n.data_dirs() for n in world.nodes), "data dirs removed")
