"""`make run` is a whole appliance (issue 26): `appliance up` enrolls a development node of
its own (appliance/devnode.py, docs/dev-node.md), and on it, through the API, as a user
of `make run` would: an LB answers curl through a real nginx on 127.0.0.1, a config lands
under the node's root prefix, a DBaaS instance runs a real PostgreSQL that `psql`
reaches on 127.0.0.1, and a service says once that it cannot run (no systemd here).

One `appliance up` for the module. Its state directory is in a 0755 directory of /tmp,
not pytest's: the OS user postgres must reach its data through it. Its path is long on
purpose, as a checkout's ./var often is: PostgreSQL's socket would be longer than the
107 bytes the kernel takes, so it goes to /tmp (appliance/sqldb/pg.py socket_dir)."""

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest
from dnslib import DNSRecord

from appliance import devnode
from appliance.service.node import NO_SYSTEMD
from appliance.sqldb import pg
from tests import waiting
from tests.apiserver import Client, TOKEN_PATH
from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user
from tests.lb.nginxnode import Backend, free_port as free_port_on
from tests.nginx import require_nginx
from tests.sqldb.pgnode import require_postgres

from .test_supervisor import Up, free_port, still_alive

pytestmark = pytest.mark.timeout(300)

PASSWORD = "Dev-node-admin-1"
PATIENCE = 120.0
LB = "/v1/network/lb"
NODES = "/v1/compute/nodes"


def eventually(check, what, seconds=PATIENCE):
    return waiting.eventually(check, seconds, what, interval=0.1)


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    require_nginx("stream")
    base = tempfile.mkdtemp(prefix="dn-", dir="/tmp")
    os.chmod(base, 0o755)
    state = os.path.join(base, "home-of-someone", "src", "appliance", "var")
    sqldb_port = free_port()
    running = Up(tmp_path_factory.mktemp("up"), state_dir=state, extra_env={
        "APPLIANCE_ADMIN_PASSWORD": PASSWORD, "APPLIANCE_SQLDB_PORT": str(sqldb_port),
        # a long poll ends at once on a change anyway; a short one makes the stop quick
        "APPLIANCE_AGENT_POLL_WAIT": "5"},
        # as `make run` has it: the on-demand daemons stop when idle and each first use
        # below starts its daemon again (docs/on-demand-daemons.md)
        idle_stop="60")
    running.sqldb_port = sqldb_port
    try:
        running.wait_line("appliance API is ready at ")
        token = Client("127.0.0.1", running.api_port).post(TOKEN_PATH, {
            "grant_type": "password", "username": "admin", "password": PASSWORD,
            "scope": ""}).json["access_token"]
        running.admin = Client("127.0.0.1", running.api_port, token)
        yield running
    finally:
        running.tree()
        running.close()
        # PostgreSQL's sockets went to /tmp (the path is long on purpose, see above)
        for run in glob.glob(os.path.join(state, devnode.ROOT,
                                          "var/lib/appliance/sqldb/*/run")):
            shutil.rmtree(pg.socket_dir(run, sqldb_port), ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def node(up):
    """The development node's record, once its agent has reported."""
    settings = {"state_dir": str(up.state_dir)}
    cred = eventually(lambda: devnode.credential(settings), "the node's credential file")
    agent = f"/v1/ua/agents/{cred['agent']}"

    def connected():
        got = up.admin.get(agent)
        return got.json if got.status == 200 and got.json.get("status") == "ACTIVE" else None
    eventually(connected, "the development node's agent ACTIVE")
    record = up.admin.get(f"{NODES}/{cred['node']}").json
    return {**record, "root": cred["root"]}


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def wait_status(admin, path, status="ACTIVE"):
    def check():
        got = admin.get(path).json
        return got if got.get("status") == status else None
    try:
        return eventually(check, f"{path} {status}")
    except AssertionError:
        got = admin.get(path).json
        raise AssertionError(f"{path}: {got.get('status')} {got.get('status_reason')} "
                             f"{got.get('node_status')}") from None


def test_the_development_node_is_the_appliances_own(up, node):
    assert node["name"] == devnode.NAME and node["node_type"] == "HW"
    assert node["project_id"] == ADMIN_PROJECT and node["status"] == "ACTIVE"
    assert node["default_network"]["ipv4"] == "127.0.0.1"
    assert node["root"] == os.path.join(str(up.state_dir), devnode.ROOT)
    assert any(line.startswith(f"development node {devnode.NAME} at 127.0.0.1")
               for line in up.seen)


def test_an_lb_on_the_development_node_answers_curl(up, node):
    admin = up.admin
    backend = Backend("dev")
    try:
        lb = created(admin.post(LB, {"name": f"lb-{uuid.uuid4().hex[:6]}",
                                     "project_id": ADMIN_PROJECT,
                                     "type": {"kind": "core_agent"}}))
        pool = created(admin.post(f"{LB}/{lb['uuid']}/backend_pools", {"endpoints": [
            {"kind": "host", "host": "127.0.0.1", "port": backend.port}]}))
        port = free_port_on("127.0.0.1")
        vhost = created(admin.post(f"{LB}/{lb['uuid']}/vhosts", {
            "protocol": "http", "port": port, "domains": ["shop.test"]}))
        created(admin.post(f"{LB}/{lb['uuid']}/vhosts/{vhost['uuid']}/routes", {
            "condition": {"kind": "prefix", "value": "/", "actions": [
                {"kind": "backend", "pool": pool["uuid"], "protocol": {"kind": "http"}}]}}))
        active = wait_status(admin, f"{LB}/{lb['uuid']}")
        assert active["ipsv4"] == ["127.0.0.1"]
        done = subprocess.run(["curl", "-sS", "--noproxy", "*", "-H", "Host: shop.test",
                               f"http://127.0.0.1:{port}/hello"],
                              capture_output=True, text=True, timeout=30)
        assert (done.returncode, done.stdout) == (0, "dev /hello"), done.stderr
        # nginx's files are under the node's root prefix; it listens on loopback only
        current = os.path.join(node["root"], "etc/appliance/lb/current")
        conf = ""
        for name in sorted(os.listdir(current)):
            if name.endswith(".conf"):
                with open(os.path.join(current, name)) as f:
                    conf += f.read()
        assert f"listen 127.0.0.1:{port}" in conf
        up.tree()       # nginx, for the clean-up should the stop miss it
    finally:
        backend.stop()


def test_the_appliances_ports_stay_reserved_on_the_development_node(up, node):
    lb = created(up.admin.post(LB, {"name": f"lb-{uuid.uuid4().hex[:6]}",
                                    "project_id": ADMIN_PROJECT,
                                    "type": {"kind": "core_agent"}}))
    for port in (up.api_port, 443, 22):
        resp = up.admin.post(f"{LB}/{lb['uuid']}/vhosts", {
            "protocol": "http", "port": port, "domains": ["taken.test"]})
        assert resp.status == 409, resp
        assert "the appliance" in resp.json["message"] or "SSH" in resp.json["message"]
    assert up.admin.get(f"{LB}/{lb['uuid']}/vhosts").json == []
    assert up.admin.delete(f"{LB}/{lb['uuid']}").status in (200, 204)


def test_a_projects_user_cannot_target_the_development_node(up, node):
    """The development node is the appliance's own: a project's owner writing a config
    onto it (root on the workstation, through on_change) is refused, nothing is made."""
    project = make_project(up.admin)
    user, name, password = make_user(up.admin)
    bind(up.admin, user, "owner", project)
    token = Client("127.0.0.1", up.api_port).post(TOKEN_PATH, {
        "grant_type": "password", "username": name, "password": password,
        "scope": f"project:{project}"}).json["access_token"]
    owner = Client("127.0.0.1", up.api_port, token)
    resp = owner.post("/v1/config/configs", {
        "name": "grab", "project_id": project, "path": "/etc/grab.conf",
        "target": {"kind": "node", "node": node["uuid"]},
        "body": {"kind": "text", "content": "x\n"}})
    assert resp.status == 400 and "not found in project" in resp.json["message"], resp
    assert not [c for c in up.admin.get("/v1/config/configs").json
                if c.get("name") == "grab"]
    assert not os.path.exists(node["root"] + "/etc/grab.conf")


def test_a_config_lands_under_the_root_prefix(up, node):
    path = f"/etc/app/{uuid.uuid4().hex[:8]}.conf"
    config = created(up.admin.post("/v1/config/configs", {
        "name": f"c-{uuid.uuid4().hex[:6]}", "project_id": ADMIN_PROJECT, "path": path,
        "target": {"kind": "node", "node": node["uuid"]},
        "body": {"kind": "text", "content": "hello from make run\n"}}))
    wait_status(up.admin, f"/v1/config/configs/{config['uuid']}")
    with open(node["root"] + path) as f:
        assert f.read() == "hello from make run\n"
    assert not os.path.exists(path)


def test_a_database_on_the_development_node_takes_psql(up, node):
    require_postgres()
    admin = up.admin
    versions = admin.get("/v1/types/sqldb/versions/").json["versions"]
    version = next(v for v in versions if v["name"] == "15")
    instance = created(admin.post("/v1/sqldb/instances", {
        "name": "orders", "project_id": ADMIN_PROJECT, "cpu": 1, "ram": 512,
        "disk_size": 8, "nodes_number": 1, "sync_replica_number": 0,
        "version": f"/v1/types/sqldb/versions/{version['uuid']}",
        "placement": {"kind": "nodes", "nodes": [node["uuid"]]}}))
    path = f"/v1/sqldb/instances/{instance['uuid']}"
    active = wait_status(admin, path)
    up.tree()           # PostgreSQL, for the clean-up
    assert active["ipsv4"] == ["127.0.0.1"]
    # its endpoint's name, as our DNS server answers it, is the node's address
    reply = DNSRecord.parse(DNSRecord.question(active["endpoint"], "A").send(
        "127.0.0.1", up.dns_port, timeout=5))
    assert [str(rr.rdata) for rr in reply.rr if rr.rtype == 1] == ["127.0.0.1"]
    user = created(admin.post(path + "/users", {"name": "app", "password": "app-Pass-1"}))
    wait_status(admin, f"{path}/users/{user['uuid']}")
    db = created(admin.post(path + "/databases", {
        "name": "app_db",
        "owner": f"/v1/types/sqldb/instances/{instance['uuid']}/users/{user['uuid']}"}))
    wait_status(admin, f"{path}/databases/{db['uuid']}")
    env = {**os.environ, "PGPASSWORD": "app-Pass-1", "PGCONNECT_TIMEOUT": "5",
           "PGSSLMODE": "disable"}
    done = subprocess.run(["psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p",
                           str(up.sqldb_port), "-U", "app", "-d", "app_db", "-c",
                           "SELECT current_user || '@' || current_database()"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "app@app_db"), done.stderr
    # its data lives under the node's root prefix, owned by postgres (PostgreSQL
    # refuses root)
    data = os.path.join(node["root"], "var/lib/appliance/sqldb", instance["uuid"], "data")
    assert os.path.isfile(os.path.join(data, "PG_VERSION"))

    assert os.stat(data).st_uid == pwd.getpwnam("postgres").pw_uid


def test_a_service_says_once_that_there_is_no_systemd(up, node):
    svc = created(up.admin.post("/v1/em/services", {
        "name": f"s{uuid.uuid4().hex[:6]}", "project_id": ADMIN_PROJECT,
        "path": "sleep infinity", "target": {"kind": "node", "node": node["uuid"]},
        "service_type": {"kind": "simple"}}))
    failed = wait_status(up.admin, f"/v1/em/services/{svc['uuid']}", "ERROR")
    assert NO_SYSTEMD in str(failed), failed
    # the agent's tick looks at services about every second: a few of them later, it
    # has still said it once, and logged no systemctl warning
    time.sleep(4)
    log = up.full_log()
    assert log.count(NO_SYSTEMD) == 1, log[-3000:]
    assert "systemctl show" not in log


def test_no_dev_node_when_turned_off(tmp_path):
    off = Up(tmp_path, extra_env={"APPLIANCE_DEV_NODE": "0"})
    try:
        off.wait_line("appliance API is ready at ")
        assert not any(line.startswith("development node") for line in off.seen)
        assert not os.path.exists(os.path.join(str(off.state_dir), devnode.CREDENTIAL))
    finally:
        off.close()


def test_stopping_up_stops_the_node_s_nginx_and_postgres(up, node):
    """Last in the module: the supervisor's stop takes what the agent started along."""
    tree = up.tree()
    names = {}
    for pid in tree:
        try:
            with open(f"/proc/{pid}/comm") as f:
                names[pid] = f.read().strip()
        except OSError:
            pass
    assert "nginx" in names.values()
    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(timeout=60) == 0
    eventually(lambda: not [p for p, started in tree.items() if still_alive(p, started)],
               "every process of `appliance up` gone", 30)
