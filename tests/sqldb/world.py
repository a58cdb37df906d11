"""A whole DBaaS on this machine, every part real, for the end-to-end test and the bench:
the API (Waitress), the sqldb daemon (first primary, failover, status, endpoint), our DNS
server, and HW nodes each with a real agent process on its own root prefix and loopback
address, whose sqldb driver runs Debian's PostgreSQL."""

import glob
import os
import shutil
import signal
import subprocess
import tempfile

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
INSTANCES = "/v1/sqldb/instances"
# bounds that only keep a broken run from hanging: figures are printed, not asserted
PATIENCE = 120.0


def eventually(check, what, seconds=PATIENCE, interval=0.1):
    return waiting.eventually(check, seconds, what, interval=interval)


class PgNode:
    """A HW node: its agent process, root prefix and loopback address."""

    def __init__(self, api, admin, base, address):
        self.address = address
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

    def postmaster_pids(self):
        pids = []
        for data in self.data_dirs():
            try:
                with open(os.path.join(data, "postmaster.pid")) as f:
                    pids.append(int(f.readline()))
            except (OSError, ValueError):
                continue
        return pids

    def lose(self):
        """The node is lost: its agent and its PostgreSQL die at once."""
        self.agent.kill()
        for pid in self.postmaster_pids():
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


class World:
    """start() brings everything up; stop() takes it all down, PostgreSQL included.
    `dns_address`/`dns_port`: where our DNS server listens (the bench serves it on port 53
    of its own loopback address, so the system resolver of a private mount namespace can
    use it)."""

    def __init__(self, addresses, failover_seconds=5, dns_address="127.0.0.1", dns_port=None):
        self.addresses = addresses
        self.failover_seconds = failover_seconds
        self.dns_address, self.dns_port = dns_address, dns_port or free_port(dns_address)
        # short: PostgreSQL's socket path under a node's prefix must stay within 107 bytes
        self.base = tempfile.mkdtemp(prefix="sq-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.port = free_port(addresses[0])
        self.nodes, self.api, self.daemon, self.dns = [], None, None, None

    def start(self):
        settings = {"sqldb_port": self.port, "sqldb_client_networks": "127.0.0.0/8",
                    "sqldb_failover_seconds": self.failover_seconds}
        self.api = ApiServer(os.path.join(self.base, "state"), ADMIN_PASSWORD,
                             api_threads=16, **settings).start()
        state = self.api.settings["state_dir"]
        env = {"APPLIANCE_" + k.upper(): str(v) for k, v in settings.items()}
        self.daemon = DaemonProcess("sqldb", state, env=env).start()
        # the Element Manager's builder, delivery, and the status of configs on nodes
        self.others = [DaemonProcess(name, state, env=env).start()
                       for name in ("builder", "delivery", "status")]
        self.dns = DNSDaemon(state, self.dns_port, host=self.dns_address).start()
        self.admin = self.api.client(self.api.login("admin", ADMIN_PASSWORD))
        for i, address in enumerate(self.addresses):
            self.nodes.append(PgNode(self.api, self.admin,
                                     os.path.join(self.base, f"n{i}"), address))
        return self

    def stop(self):
        for node in self.nodes:
            node.cleanup()
        for part in (self.daemon, self.dns, *getattr(self, "others", ())):
            if part:
                part.stop()
        if self.api:
            self.api.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    # ---- reads --------------------------------------------------------------------------

    def version(self, name="15"):
        versions = self.admin.get("/v1/types/sqldb/versions/").json["versions"]
        return next(v for v in versions if v["name"] == name)

    def node(self, uuid):
        return next(n for n in self.nodes if n.uuid == uuid)

    def instance(self, uuid):
        return self.admin.get(f"{INSTANCES}/{uuid}").json

    def report(self, node, instance_uuid):
        """The sqldb report of `node` for the instance, as the API stored it."""
        for row in self.api.store.collection("ua_resources").by("node", node.uuid):
            if row.get("kind") == "sqldb" and \
                    instance_uuid in (row.get("res_uuid"), row.get("master")):
                return row
        return None

    def resolve(self, name):
        reply = DNSRecord.parse(DNSRecord.question(name, "A").send(
            self.dns_address, self.dns_port, timeout=2))
        return [str(rr.rdata) for rr in reply.rr if rr.rtype == 1]

    # ---- writes -------------------------------------------------------------------------

    def create_instance(self, name, nodes, sync=0):
        resp = self.admin.post(INSTANCES, {
            "name": name, "project_id": ADMIN_PROJECT, "cpu": 1, "ram": 512,
            "disk_size": 8, "nodes_number": len(nodes), "sync_replica_number": sync,
            "version": f"/v1/types/sqldb/versions/{self.version()['uuid']}",
            "placement": {"kind": "nodes", "nodes": [n.uuid for n in nodes]}})
        assert resp.status == 201, resp
        return resp.json

    def wait_status(self, path, status, what, seconds=PATIENCE, interval=0.1):
        def check():
            got = self.admin.get(path).json
            return got if got.get("status") == status else None
        try:
            return eventually(check, what, seconds, interval)
        except AssertionError:
            got = self.admin.get(path).json
            raise AssertionError(f"{what}: {got.get('status')} {got.get('status_reason')} "
                                 f"{got.get('node_status')}") from None

    def delete_instance(self, instance):
        """Delete and wait until no node keeps a data dir of it."""
        assert self.admin.delete(f"{INSTANCES}/{instance['uuid']}").status in (200, 204)
        eventually(lambda: not any(glob.glob(
            f"{n.agent.root}/var/lib/appliance/sqldb/{instance['uuid']}/data")
            for n in self.nodes), "the instance's data dirs removed")


def psql(host, port, sql, password, user, database):
    env = {**os.environ, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "5",
           "PGSSLMODE": "disable"}
    return subprocess.run(["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", host,
                           "-p", str(port), "-U", user, "-d", database, "-c", sql],
                          env=env, capture_output=True, text=True, timeout=30)
