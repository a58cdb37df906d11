"""Issue 16 end to end, every part real: the API (Waitress), the sqldb daemon (failover,
status, endpoint), our DNS server, three HW nodes each with a real agent process on its
own root prefix and loopback address, and Debian's PostgreSQL on each, run by the agent's
sqldb driver.

One instance of 3 nodes with one synchronous replica goes through its life in order:
ACTIVE; a user and a database; rows written through the endpoint (a name our DNS server
answers) as that user with SCRAM; the primary's node lost (agent and PostgreSQL killed);
a replica promoted with every committed row; the old node back as a replica (pg_rewind);
a password changed; the instance deleted."""

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
from dnslib import DNSRecord

from tests import waiting
from tests.agent.agents import AgentProcess
from tests.agent.conftest import enroll
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.dns.test_server import DNSDaemon
from tests.iam.helpers import ADMIN_PROJECT
from tests.lb.helpers import hw_node, set_address
from tests.lb.nginxnode import free_port
from tests.secret.conftest import DaemonProcess

PG_BIN = "/usr/lib/postgresql/15/bin"
ADDRESSES = ("127.0.0.31", "127.0.0.32", "127.0.0.33")
FAILOVER_SECONDS = 5
# bounds that only keep a broken run from hanging: the figures are printed, not asserted
PATIENCE = 120.0
USER, DATABASE = "app_user", "app_db"
PASSWORD, NEW_PASSWORD = "first-Pass-8", "second-Pass-9"

pytestmark = pytest.mark.skipif(not os.path.exists(PG_BIN + "/postgres"),
                                reason="Debian's postgresql-15 is not installed")


def eventually(check, what, seconds=PATIENCE):
    return waiting.eventually(check, seconds, what, interval=0.1)


class PgNode:
    """A HW node: its agent process, root prefix and loopback address."""

    def __init__(self, api, admin, base, address):
        self.api, self.address = api, address
        self.record = hw_node(admin)
        self.uuid = self.record["uuid"]
        set_address(api.store, self.uuid, address)
        os.makedirs(base, mode=0o755)
        self.agent = AgentProcess(base, enroll(api, admin, self.uuid),
                                  f"http://127.0.0.1:{api.port}", wait=5)
        # PostgreSQL runs as the OS user postgres: it must reach its data dir
        os.chmod(self.agent.root, 0o755)
        self.agent.start()

    def data_dirs(self):
        return glob.glob(self.agent.root + "/var/lib/appliance/sqldb/*/data")

    def postmaster_pid(self):
        for data in self.data_dirs():
            try:
                with open(os.path.join(data, "postmaster.pid")) as f:
                    return int(f.readline())
            except (OSError, ValueError):
                continue
        return None

    def lose(self):
        """The node is lost: its agent and its PostgreSQL die at once."""
        self.agent.kill()
        pid = self.postmaster_pid()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def cleanup(self):
        if self.agent.proc and self.agent.proc.poll() is None:
            self.agent.stop()
        for data in self.data_dirs():
            subprocess.run(["runuser", "-u", "postgres", "--", PG_BIN + "/pg_ctl", "-D", data,
                            "stop", "-m", "immediate"], capture_output=True)


@pytest.fixture(scope="module")
def world():
    base = tempfile.mkdtemp(prefix="sqldb-e2e-")
    os.chmod(base, 0o755)
    pg_port = free_port(ADDRESSES[0])
    settings = {"sqldb_port": pg_port, "sqldb_client_networks": "127.0.0.0/8",
                "sqldb_failover_seconds": FAILOVER_SECONDS}
    api = ApiServer(os.path.join(base, "state"), ADMIN_PASSWORD, api_threads=16,
                    **settings).start()
    state = api.settings["state_dir"]
    env = {"APPLIANCE_" + k.upper(): str(v) for k, v in settings.items()}
    sqldb = DaemonProcess("sqldb", state, env=env).start()
    dns = DNSDaemon(state, free_port("127.0.0.1")).start()
    admin = api.client(api.login("admin", ADMIN_PASSWORD))
    nodes = []
    try:
        for i, address in enumerate(ADDRESSES):
            nodes.append(PgNode(api, admin, os.path.join(base, f"node{i}"), address))
        yield {"api": api, "admin": admin, "nodes": nodes, "dns": dns, "port": pg_port,
               "sqldb": sqldb}
    finally:
        for node in nodes:
            node.cleanup()
        for daemon in (sqldb, dns):
            daemon.stop()
        api.stop()
        shutil.rmtree(base, ignore_errors=True)


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def instance_path(instance):
    return f"/v1/sqldb/instances/{instance['uuid']}"


def wait_status(admin, path, status, what):
    def check():
        got = admin.get(path).json
        return got if got["status"] == status else None
    try:
        return eventually(check, what)
    except AssertionError:
        got = admin.get(path).json
        raise AssertionError(f"{what}: {got.get('status')} {got.get('status_reason')} "
                             f"{got.get('node_status')}") from None


def resolve(world, name):
    reply = DNSRecord.parse(DNSRecord.question(name, "A").send(
        "127.0.0.1", world["dns"].port, timeout=2))
    return [str(rr.rdata) for rr in reply.rr if rr.rtype == 1]


def psql(host, port, sql, password, user=USER, database=DATABASE):
    env = {**os.environ, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "5",
           "PGSSLMODE": "disable"}
    return subprocess.run(["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", host,
                           "-p", str(port), "-U", user, "-d", database, "-c", sql],
                          env=env, capture_output=True, text=True, timeout=30)


def rows(host, port, password=PASSWORD):
    done = psql(host, port, "SELECT count(*) FROM t", password)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def node_of(world, uuid):
    return next(n for n in world["nodes"] if n.uuid == uuid)


def report_of(world, node, instance):
    """The sqldb report of `node` for `instance` as the API stored it."""
    for row in world["api"].store.collection("ua_resources").records():
        if row.get("node") == node.uuid and row.get("kind") == "sqldb" and \
                row.get("res_uuid", row.get("master")) == instance["uuid"]:
            return row
    return None


@pytest.fixture(scope="module")
def instance(world):
    admin = world["admin"]
    versions = admin.get("/v1/types/sqldb/versions/").json["versions"]
    version = next(v for v in versions if v["name"] == "15")
    started = time.monotonic()
    made = created(admin.post("/v1/sqldb/instances", {
        "name": "orders", "project_id": ADMIN_PROJECT, "cpu": 1, "ram": 512, "disk_size": 8,
        "nodes_number": 3, "sync_replica_number": 1,
        "version": f"/v1/types/sqldb/versions/{version['uuid']}",
        "placement": {"kind": "nodes", "nodes": [n.uuid for n in world["nodes"]]}}))
    assert made["status"] == "NEW"
    active = wait_status(admin, instance_path(made), "ACTIVE", "instance ACTIVE")
    print(f"\n3-node instance created -> ACTIVE in {time.monotonic() - started:.1f} s")
    return active


def test_instance_active_with_a_streaming_sync_replica(world, instance):
    assert sorted(instance["ipsv4"]) == sorted(ADDRESSES)
    primary = node_of(world, instance["primary"])
    assert resolve(world, instance["endpoint"]) == [primary.address]
    report = report_of(world, primary, instance)
    assert report["status"] == "ACTIVE" and report["value"]["role"] == "primary"
    # ANY 1 of the two others: at least one of them is a synchronous standby
    eventually(lambda: len(report_of(world, primary, instance)["value"]["sync_standbys"]) >= 1,
               "a synchronous standby")
    for node in world["nodes"]:
        if node is not primary:
            assert report_of(world, node, instance)["value"]["role"] == "replica"


def test_user_and_database_then_rows_through_the_endpoint(world, instance):
    admin, path = world["admin"], instance_path(instance)
    user = created(admin.post(path + "/users", {"name": USER, "password": PASSWORD}))
    assert "password" not in user and "password_hash" not in user
    wait_status(admin, f"{path}/users/{user['uuid']}", "ACTIVE", "user ACTIVE")
    database = created(admin.post(path + "/databases", {
        "name": DATABASE, "owner": f"/v1/types/sqldb/instances/{instance['uuid']}/users/"
                                   f"{user['uuid']}"}))
    wait_status(admin, f"{path}/databases/{database['uuid']}", "ACTIVE", "database ACTIVE")
    host = resolve(world, instance["endpoint"])[0]
    done = psql(host, world["port"], "CREATE TABLE t (id int PRIMARY KEY, at timestamptz "
                                     "DEFAULT now())", PASSWORD)
    assert done.returncode == 0, done.stderr
    for i in range(50):         # fifty transactions, each committed on its own
        done = psql(host, world["port"], f"INSERT INTO t (id) VALUES ({i})", PASSWORD)
        assert done.returncode == 0, done.stderr
    assert rows(host, world["port"]) == 50
    wrong = psql(host, world["port"], "SELECT 1", "not-the-password")
    assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr


def test_primary_lost_replica_promoted_with_every_committed_row(world, instance):
    admin = world["admin"]
    old = node_of(world, admin.get(instance_path(instance)).json["primary"])
    lost_at = time.monotonic()
    old.lose()

    def moved():
        got = admin.get(instance_path(instance)).json
        return got if got["primary"] not in (None, old.uuid) else None
    after = eventually(moved, "a replica promoted")
    promoted = time.monotonic() - lost_at
    new = node_of(world, after["primary"])

    def serving():
        addresses = resolve(world, after["endpoint"])
        if addresses != [new.address]:
            return None
        done = psql(new.address, world["port"], "SELECT count(*) FROM t", PASSWORD)
        return done.returncode == 0 and int(done.stdout.strip())
    count = eventually(serving, "the endpoint serving from the new primary")
    print(f"\nprimary lost -> replica promoted in {promoted:.1f} s (failover after "
          f"{FAILOVER_SECONDS} s without a heartbeat); endpoint serving "
          f"{time.monotonic() - lost_at:.1f} s after the loss")
    assert count == 50, "a committed row was lost"
    assert after["epoch"] >= 1
    done = psql(resolve(world, after["endpoint"])[0], world["port"],
                "INSERT INTO t (id) VALUES (50)", PASSWORD)
    assert done.returncode == 0, done.stderr
    world["old_primary"] = old


def test_old_primary_rejoins_as_a_replica(world, instance):
    old = world["old_primary"]
    old.agent.start()

    def rejoined():
        report = report_of(world, old, instance)
        value = (report or {}).get("value") or {}
        return report if report["status"] == "ACTIVE" and value.get("role") == "replica" \
            and value.get("streaming_from") else None
    eventually(rejoined, "the old primary streaming as a replica")
    # what the new primary committed after the failover reached the old one (pg_rewind)
    eventually(lambda: rows(old.address, world["port"]) == 51, "row 50 on the old primary")
    instance_now = wait_status(world["admin"], instance_path(instance), "ACTIVE",
                               "instance ACTIVE with every member")
    assert instance_now["primary"] != old.uuid


def test_password_change_refuses_the_old_one(world, instance):
    admin, path = world["admin"], instance_path(instance)
    user = next(u for u in admin.get(path + "/users").json if u["name"] == USER)
    assert admin.put(f"{path}/users/{user['uuid']}", {"password": NEW_PASSWORD}).status == 200
    wait_status(admin, f"{path}/users/{user['uuid']}", "ACTIVE", "new password applied")
    host = resolve(world, admin.get(path).json["endpoint"])[0]
    assert rows(host, world["port"], NEW_PASSWORD) == 51
    old = psql(host, world["port"], "SELECT 1", PASSWORD)
    assert old.returncode != 0 and "password authentication failed" in old.stderr


def test_delete_removes_the_instance_everywhere(world, instance):
    admin, path = world["admin"], instance_path(instance)
    endpoint = admin.get(path).json["endpoint"]
    assert admin.delete(path).status in (200, 204)
    assert admin.get(path).status == 404
    store = world["api"].store
    assert not store.collection("sqldb_users").by("instance", instance["uuid"])
    assert not store.collection("sqldb_databases").by("instance", instance["uuid"])
    eventually(lambda: not any(n.data_dirs() for n in world["nodes"]), "data dirs removed")
    eventually(lambda: resolve(world, endpoint) == [], "the endpoint's record removed")
