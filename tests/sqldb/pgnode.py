"""What the sqldb node tests share: HW-style "nodes" (a real Host on a directory prefix, the
real Driver, a loopback address of its own in 127.0.0.20-29), an item builder shaped as
the contract (docs/sqldb-dataplane.md), SCRAM verifiers, and plain clients: psql over TCP
as a user, and a raw startup packet from a chosen source address (psql cannot pick one).

The prefixes live under a directory made 0755 in /tmp with a short name: the OS user
postgres must reach its data directory through them, and a unix socket's path is at most
107 bytes.
"""

import base64
import hashlib
import hmac
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import uuid

import pytest

from appliance.agent.host import Host
from appliance.agent.protocol import item_hash, target_uuid
from appliance.sqldb import pg
from appliance.sqldb.node import Driver
from tests.conftest import SECRET_VALUES
from tests import ports

MAJOR = 15
BIN = f"/usr/lib/postgresql/{MAJOR}/bin"
REPLICATOR_PASSWORD = "repl-" + base64.urlsafe_b64encode(os.urandom(18)).decode()
ADMIN_PASSWORD = "admin-" + base64.urlsafe_b64encode(os.urandom(18)).decode()
SECRET_VALUES.update({REPLICATOR_PASSWORD, ADMIN_PASSWORD})


def require_postgres():
    if not os.access(os.path.join(BIN, "postgres"), os.X_OK):
        pytest.skip(f"PostgreSQL {MAJOR} is not installed ({BIN})")
    if os.geteuid() != 0:
        pytest.skip("the driver runs PostgreSQL as the OS user postgres: root is needed")
    try:
        pg.os_user()
    except pg.Failed as e:
        pytest.skip(str(e))


def verifier(password, salt=None, iterations=4096):
    """A SCRAM-SHA-256 verifier in PostgreSQL's format (RFC 5802/7677; ASCII passwords,
    which SASLprep leaves as they are)."""
    salt = salt or os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored = hashlib.sha256(client).digest()
    server = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored)}:{b64(server)}"


def free_port(*addresses):
    """A port free on every one of `addresses` (all members use the same port, as on
    real nodes)."""
    return ports.free_port(addresses[0],
                           also=[(a, socket.SOCK_STREAM) for a in addresses[1:]])


class Node:
    """One HW-style node: Host on `<base>/n<last octet>`, its driver, its address."""

    def __init__(self, base, address, **host_args):
        self.address = address
        self.uuid = str(uuid.uuid4())
        self.name = "n" + self.uuid.replace("-", "")
        self.root = os.path.join(base, "n" + address.rsplit(".", 1)[1])
        os.makedirs(self.root, mode=0o755, exist_ok=True)
        self.host = Host(root=self.root, state_dir=os.path.join(self.root, "state"),
                         **host_args)
        self.driver = Driver(self.host)
        self.driver.retry_first = 0.5
        self.driver.retry_max = 2.0
        self.items = {}

    @property
    def member(self):
        return {"node": self.uuid, "host": self.address, "name": self.name}

    def cluster(self, instance, port):
        return pg.Cluster(self.host, instance, MAJOR, port, self.address)

    def apply(self, item):
        before = self.items.get(item["uuid"])
        self.items[item["uuid"]] = item
        return self.driver.apply(item, before)

    def tick(self):
        return {r["uuid"]: r for r in self.driver.tick(list(self.items.values()))}

    def remove(self, item):
        self.items.pop(item["uuid"], None)
        self.driver.remove(item)

    def postmaster(self, instance, port):
        return pg.postmaster_pid(self.cluster(instance, port))

    def kill(self, instance, port):
        """SIGKILL the postmaster, and wait for its children to notice and end."""
        c = self.cluster(instance, port)
        os.kill(pg.postmaster_pid(c), signal.SIGKILL)
        assert pg.wait_gone(c, 30), "the killed postmaster's children did not end"


class Instance:
    """The contract's items for one instance over `nodes`, from its wanted state."""

    def __init__(self, nodes, port, sync=0, hba=("127.0.0.1/32",)):
        self.uuid = str(uuid.uuid4())
        self.nodes = nodes
        self.port = port
        self.sync = sync
        self.hba = list(hba)
        self.epoch = 0
        self.primary = nodes[0]
        self.users = {}
        self.databases = {}
        self.ram_mb = 256
        self.major = MAJOR

    def set_password(self, user, password):
        SECRET_VALUES.add(password)
        self.users[user] = verifier(password)

    def item(self, node):
        members = sorted((n.member for n in self.nodes), key=lambda m: m["node"])
        value = {
            "instance": self.uuid, "epoch": self.epoch, "major": self.major,
            "port": self.port, "self": node.member,
            "role": "primary" if node is self.primary else "replica",
            "primary": self.primary.member, "members": members,
            "sync_replica_number": self.sync, "hba": list(self.hba),
            "replication": {"user": "dbaas_replicator", "password": REPLICATOR_PASSWORD},
            "admin": {"user": "dbaas_admin", "password": ADMIN_PASSWORD},
            "users": dict(self.users), "databases": dict(self.databases),
            "resources": {"cpu": 1, "ram_mb": self.ram_mb}}
        item = {"uuid": target_uuid(node.uuid, "sqldb", self.uuid), "kind": "sqldb",
                "master": self.uuid, "master_kind": "sqldb_instances", "value": value}
        return {**item, "hash": item_hash(item)}

    def apply(self, node):
        return node.apply(self.item(node))

    def failover(self, new_primary):
        self.primary = new_primary
        self.epoch += 1


@pytest.fixture(scope="module")
def base():
    """The directory holding the module's node prefixes (0755, short path); every
    PostgreSQL under it stopped at the end."""
    require_postgres()
    path = tempfile.mkdtemp(prefix="sq-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    stop_all_under(path)
    shutil.rmtree(path, ignore_errors=True)


def stop_all_under(path):
    real = os.path.realpath(path)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if cwd.startswith(real + "/") and b"postgres" in cmd.split(b"\0")[0]:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except ProcessLookupError:
                pass


# ---- clients --------------------------------------------------------------------------------

def psql(address, port, user, password, sql, db="postgres"):
    """(exit code, output) of psql over TCP as `user` with its clear password."""
    env = {"PATH": "/usr/bin:/bin", "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10",
           "PGSSLMODE": "disable", "PGAPPNAME": "test"}
    done = subprocess.run([f"{BIN}/psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                           "-h", address, "-p", str(port), "-U", user, "-d", db,
                           "-c", sql], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    return done.returncode, done.stdout.strip()


def local_sql(node, instance, port, sql, db="postgres"):
    """Rows of `sql` run as postgres over the node's local socket (the driver's path)."""
    return pg.psql(node.cluster(instance, port), sql, db=db).strip()


def startup_from(source, address, port, user, db="postgres"):
    """The server's first answer to a startup packet sent from `source` (bound), as
    (message type, text): 'E' with the error text when it refuses, 'R' when it asks for
    authentication."""
    with socket.socket() as s:
        s.settimeout(10)
        s.bind((source, 0))
        s.connect((address, port))
        body = struct.pack("!I", 196608) + b"".join(
            k.encode() + b"\0" + v.encode() + b"\0"
            for k, v in (("user", user), ("database", db))) + b"\0"
        s.sendall(struct.pack("!I", len(body) + 4) + body)
        kind = s.recv(1)
        length = struct.unpack("!I", _recv_exact(s, 4))[0]
        payload = _recv_exact(s, length - 4)
    if kind == b"E":
        fields = dict((f[:1].decode(), f[1:].decode(errors="replace"))
                      for f in payload.split(b"\0") if f)
        return "E", fields.get("M", "")
    return kind.decode(), ""


def _recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data
