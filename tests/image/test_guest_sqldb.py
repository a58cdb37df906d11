"""Issue 16's VM-based run: DBaaS in the appliance image booted once by `box` (TCG), on
the appliance's own node (enrolled at first boot), in the guest's real systemd, through
the API over the forwarded HTTPS port (tests/sqldb/test_e2e.py runs the 3-node life on
the host, with HW nodes on loopback addresses):

- before anything is placed, no PostgreSQL runs (Debian's cluster is not in the image and
  postgresql.service is masked: issue 12's idle memory);
- a 1-node instance reaches ACTIVE, its PostgreSQL under the agent's unit
  `appliance-sqldb-<instance>.service`, as the OS user postgres, on the node's address;
- a user and a database reach ACTIVE; in the guest the endpoint's name resolves through
  the appliance's DNS server (port 53) to the node's address, and psql as that user
  (SCRAM) through that address writes and reads rows;
- the postmaster killed with SIGKILL comes back by itself, with the rows;
- a boot's hand-over of the state to the appliance user leaves the data PostgreSQL's;
- the instance deleted: its unit, its data directory and its DNS record are gone.

The tests build on each other in file order. Figures are printed (-s), not asserted.
"""

import json
import shlex
import subprocess
import time

import pytest

from appliance.sqldb.versions import NODE_IMAGE_MAJOR
from tests import waiting
from tests.image.guest import listening_tcp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

NODES = "/v1/compute/nodes"
INSTANCES = "/v1/sqldb/instances"
VERSIONS = "/v1/types/sqldb/versions/"
# the PostgreSQL that the images carry (Debian 13's), whatever the host running the test has
PG_MAJOR = NODE_IMAGE_MAJOR
PG_BIN = f"/usr/lib/postgresql/{PG_MAJOR}/bin"
BASE = "/var/lib/appliance/sqldb"
PORT = 5432                             # the setting sqldb_port's default
ENVIRONMENT = "/etc/appliance/environment"
USER, DATABASE = "app_user", "app_db"
PASSWORD = "guest-Pass-8x"
ROWS = 20
# a change through the API reaching PostgreSQL in the TCG guest and coming back as a
# status: long poll, the driver's initdb and start, its report, the sqldb daemon's pass;
# initdb alone takes tens of seconds under TCG on a busy machine
CONVERGE = 600


def eventually(check, what, seconds=CONVERGE):
    """A check whose SSH command into the guest timed out counts as "not yet" (a TCG
    guest on a loaded host can take minutes to answer one)."""
    def patient():
        try:
            return check()
        except subprocess.TimeoutExpired:
            return None
    return waiting.eventually(patient, seconds, what, interval=1)


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def unit_of(instance):
    return f"appliance-sqldb-{instance['uuid']}.service"


def wait_status(admin, path, wanted, what, seconds=CONVERGE):
    def check():
        got = admin.get(path).json
        return got if got["status"] == wanted else None
    try:
        return eventually(check, what, seconds)
    except AssertionError:
        got = admin.get(path).json
        raise AssertionError(f"{what}: {got.get('status')} {got.get('status_reason')} "
                             f"{got.get('node_status')}") from None


def postgres_processes(box):
    """{pid: its cgroup} of the guest's processes named postgres (one that ends while
    listed is left out)."""
    out = box.ssh("for p in $(pgrep -x postgres); do "
                  "c=$(cut -d: -f3 /proc/$p/cgroup 2>/dev/null) && echo $p $c; done",
                  check=False).stdout
    return dict(line.split(None, 1) for line in out.splitlines() if line.strip())


def memory_of(box, unit):
    """(RSS kB, PSS kB) summed over the processes of a unit (tests/image/qemu.py's
    unit_memory, but a process that ends meanwhile is left out: the driver's own
    sessions come and go every few seconds)."""
    out = box.ssh(f"for p in $(cat /sys/fs/cgroup/system.slice/{unit}/cgroup.procs); do "
                  "grep -hE '^(Rss|Pss):' /proc/$p/smaps_rollup 2>/dev/null; done",
                  check=False).stdout.split("\n")
    fields = [line.split() for line in out if line.strip()]
    return (sum(int(f[1]) for f in fields if f[0] == "Rss:"),
            sum(int(f[1]) for f in fields if f[0] == "Pss:"))


def psql(box, host, sql, password=PASSWORD):
    """psql inside the guest, over TCP to `host` (not the socket), as the user."""
    env = (f"PGPASSWORD={shlex.quote(password)} PGSSLMODE=disable PGCONNECT_TIMEOUT=10 "
           "LC_ALL=C.UTF-8")
    return box.ssh(f"{env} {PG_BIN}/psql -X -A -t -v ON_ERROR_STOP=1 -h {host} -p {PORT} "
                   f"-U {USER} -d {DATABASE} -c {shlex.quote(sql)}", check=False)


def superuser_sql(box, instance, sql):
    """SQL as postgres over the instance's own socket (peer authentication), in the guest."""
    run_dir = f"{BASE}/{instance['uuid']}/run"
    return box.ssh(f"runuser -u postgres -- {PG_BIN}/psql -X -A -t -h {run_dir} -p {PORT} "
                   f"-d postgres -c {shlex.quote(sql)}").stdout.strip()


@pytest.fixture(scope="module")
def placed(box):
    """(admin client, the appliance's node record, its address). The node's own address is
    the clients' network here (psql runs in the guest, from that address): the setting
    sqldb_client_networks, as an administrator sets it, in the units' environment file;
    the API (the producer) and the sqldb daemon (which compares item hashes) restarted to
    read it. Taken out again at the end."""
    cred = json.loads(box.ssh("cat /etc/appliance/agent.json").stdout)
    admin = box.admin()
    resp = admin.get(f"{NODES}/{cred['node']}")
    assert resp.status == 200, resp
    node = resp.json
    address = node["default_network"]["ipv4"]
    line = f"APPLIANCE_SQLDB_CLIENT_NETWORKS={address}/32"
    box.ssh(f"echo {line} >> {ENVIRONMENT} && "
            "systemctl restart appliance-api.service appliance-sqldb.service")
    box.wait_healthy()
    yield box.admin(), node, address
    box.ssh(f"sed -i '/^APPLIANCE_SQLDB_CLIENT_NETWORKS=/d' {ENVIRONMENT} && "
            "systemctl restart appliance-api.service appliance-sqldb.service", check=False)
    box.wait_healthy()


@pytest.fixture(scope="module")
def instance(box, placed):
    admin, node, _ = placed
    # nothing of PostgreSQL runs or is enabled before an instance is placed here
    assert postgres_processes(box) == {}
    assert box.ssh("systemctl is-enabled postgresql.service",
                   check=False).stdout.strip() == "masked"
    assert box.ssh(f"test -e /var/lib/postgresql/{PG_MAJOR}/main || "
                   f"test -e /etc/postgresql/{PG_MAJOR}/main", check=False).returncode == 1
    # the version list offers what the image carries: the seed of its major
    versions = admin.get(VERSIONS).json["versions"]
    version = next(v for v in versions if v["name"] == str(PG_MAJOR))
    assert (version["major"], version["deprecated"]) == (PG_MAJOR, False), version
    started = time.monotonic()
    made = created(admin.post(INSTANCES, {
        "name": "guest-db", "project_id": node["project_id"], "cpu": 1, "ram": 512,
        "disk_size": 8, "nodes_number": 1, "sync_replica_number": 0,
        "version": f"{VERSIONS}{version['uuid']}",
        "placement": {"kind": "nodes", "nodes": [node["uuid"]]}}))
    assert made["status"] == "NEW"
    active = wait_status(admin, f"{INSTANCES}/{made['uuid']}", "ACTIVE", "instance ACTIVE")
    print(f"\nsqldb in the guest: 1-node instance created -> ACTIVE in "
          f"{time.monotonic() - started:.1f} s")
    yield active
    admin.delete(f"{INSTANCES}/{made['uuid']}")      # a no-op after the delete test


def test_the_instance_runs_under_its_unit(box, placed, instance):
    _, node, address = placed
    assert instance["primary"] == node["uuid"]
    assert instance["ipsv4"] == [address]
    assert instance["endpoint"] == f"{instance['uuid']}.sqldb.appliance.internal"
    unit = unit_of(instance)
    shown = box.show(unit, "ActiveState", "UnitFileState", "MainPID", "User")
    assert shown["ActiveState"] == "active" and shown["UnitFileState"] == "enabled"
    assert shown["User"] == "postgres"
    pid = int(shown["MainPID"])
    args = box.ssh(f"ps -o user=,args= -p {pid}").stdout.split()
    assert args[0] == "postgres" and args[1] == f"{PG_BIN}/postgres"
    assert f"{BASE}/{instance['uuid']}/data" in args
    # every postgres process of the guest is this instance's, in its unit's cgroup
    procs = postgres_processes(box)
    assert str(pid) in procs and len(procs) > 1
    assert set(procs.values()) == {f"/system.slice/{unit}"}
    # on the node's address only (the contract: self.host:port)
    assert (address, PORT) in listening_tcp(box)
    assert not {(a, p) for a, p in listening_tcp(box) if p == PORT} - {(address, PORT)}
    assert box.ssh(f"stat -c '%U %a' {BASE}/{instance['uuid']}/data").stdout.split() == \
        ["postgres", "700"]
    rss, pss = memory_of(box, unit)
    print(f"sqldb in the guest: {unit}: {len(procs)} processes, idle RSS {rss / 1024:.1f} MB,"
          f" PSS {pss / 1024:.1f} MB")


def test_user_and_database_then_rows_through_the_endpoint(box, placed, instance):
    admin, _, address = placed
    path = f"{INSTANCES}/{instance['uuid']}"
    user = created(admin.post(path + "/users", {"name": USER, "password": PASSWORD}))
    wait_status(admin, f"{path}/users/{user['uuid']}", "ACTIVE", "user ACTIVE")
    database = created(admin.post(path + "/databases", {
        "name": DATABASE, "owner": f"/v1/types/sqldb/instances/{instance['uuid']}/users/"
                                   f"{user['uuid']}"}))
    wait_status(admin, f"{path}/databases/{database['uuid']}", "ACTIVE", "database ACTIVE")
    # the endpoint asked in the guest of the DNS server on port 53 of its address
    resolved = eventually(lambda: box.guest_udp_answer(instance["endpoint"]),
                          "the endpoint answered")
    assert resolved == [address]
    host = resolved[0]
    done = psql(box, host, "CREATE TABLE t (id int PRIMARY KEY, note text)")
    assert done.returncode == 0, done.stderr
    for i in range(ROWS):               # each INSERT committed on its own
        done = psql(box, host, f"INSERT INTO t VALUES ({i}, 'row {i}')")
        assert done.returncode == 0, done.stderr
    done = psql(box, host, "SELECT count(*), max(note) FROM t")
    assert done.stdout.strip() == f"{ROWS}|row 9", done.stderr
    # SCRAM: the role holds a SCRAM verifier, and a wrong password is refused
    assert superuser_sql(box, instance, f"SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM "
                                        f"pg_authid WHERE rolname = '{USER}'") == "t"
    wrong = psql(box, host, "SELECT 1", password="not-the-password")
    assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr


def test_postgres_killed_with_sigkill_comes_back_with_the_rows(box, placed, instance):
    admin, _, address = placed
    unit = unit_of(instance)
    before = int(box.show(unit, "MainPID")["MainPID"])
    killed_at = time.monotonic()
    box.ssh(f"kill -KILL {before}")

    def back():
        shown = box.show(unit, "ActiveState", "MainPID")
        return shown["ActiveState"] == "active" and \
            int(shown["MainPID"]) not in (0, before) and \
            psql(box, address, "SELECT count(*) FROM t").stdout.strip() == str(ROWS)
    eventually(back, "PostgreSQL back with the rows")
    seconds = time.monotonic() - killed_at
    restarts = box.show(unit, "NRestarts")["NRestarts"]
    print(f"sqldb in the guest: postmaster SIGKILL -> serving the rows again in "
          f"{seconds:.1f} s (systemd restarts of the unit: {restarts})")
    wait_status(admin, f"{INSTANCES}/{instance['uuid']}", "ACTIVE", "instance ACTIVE again")


def test_a_boots_hand_over_leaves_the_data_to_postgresql(box, placed, instance):
    """Every boot, first boot's hand_over gives the state to the appliance user: the
    instance's data, under the state directory here, must stay PostgreSQL's (it refuses
    a data directory that is not its own), and the state directory must stay
    traversable for it. The boot's step run as it is, then the unit restarted."""
    _, _, address = placed
    unit, data = unit_of(instance), f"{BASE}/{instance['uuid']}/data"
    box.ssh("/opt/appliance/venv/bin/python -P -c 'import pwd; "
            "from appliance.firstboot import hand_over; u = pwd.getpwnam(\"appliance\"); "
            "hand_over(\"/var/lib/appliance\", u.pw_uid, u.pw_gid)'")
    assert box.ssh("stat -c '%U %a' /var/lib/appliance").stdout.split() == ["appliance", "711"]
    assert box.ssh(f"find {BASE}/{instance['uuid']} ! -user postgres").stdout == ""
    box.ssh(f"systemctl restart {unit}")
    eventually(lambda: psql(box, address, "SELECT count(*) FROM t").stdout.strip()
               == str(ROWS), "PostgreSQL restarted with the rows")
    assert box.ssh(f"stat -c %U {data}").stdout.strip() == "postgres"


def test_delete_removes_the_unit_and_the_data(box, placed, instance):
    admin, _, address = placed
    unit = unit_of(instance)
    assert admin.delete(f"{INSTANCES}/{instance['uuid']}").status in (200, 204)
    eventually(lambda: box.show(unit, "LoadState")["LoadState"] == "not-found",
               "the unit gone")
    assert box.ssh(f"test -e /etc/systemd/system/{unit}", check=False).returncode == 1
    eventually(lambda: box.ssh(f"test -e {BASE}/{instance['uuid']}",
                               check=False).returncode == 1, "the data directory removed")
    assert postgres_processes(box) == {}
    assert (address, PORT) not in listening_tcp(box)
    eventually(lambda: box.guest_udp_answer(instance["endpoint"]) == [],
               "the endpoint's record removed")
