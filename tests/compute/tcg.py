"""The appliance inside a test network namespace, booting real VMs under TCG.

Shared by tests/compute/test_e2e_tcg.py and tests/bench/bench_compute_tcg.py. Everything
goes through the API, as a user would: the test only reads libvirt (through the
namespace's URI) and the guests (over SSH from inside the namespace) to check what the
API says. docs/testing-vms.md tells how the namespace is made.

    with appliance_in_netns(workdir) as env:
        hv = env.register_hypervisor()
        ...
"""

import contextlib
import functools
import http.server
import importlib
import os
import threading
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET

from appliance.iam import builtin
from tests.apiserver import Client
from tests.bench import Service, daemon_ready, http_get, login, settings_for
from tests.compute.netns import Netns, unavailable
from tests.image import qemu

MARKER = "APPLIANCE-NODE-READY"
NO_SEED = "Datasource DataSourceNone"       # cloud-init's final line when it read no seed
ADMIN_PROJECT = builtin.ADMIN_PROJECT
NODE_NS = "https://appliance.local/ns/node"
# A bound on a hang, not a measure: docs/image.md measured the node image's cloud-init
# marker at 55-61 s on an idle machine and 213 s under a load of 6 (TCG, 2 shared cores).
BOOT_TIMEOUT = 1200
# cloud-init's default user in the node image (Debian's cloud.cfg; passwordless sudo):
# the keys of the seed's ssh_authorized_keys go to it
SSH_USER = "debian"
DISK_GB = 4                   # the node image's root is 1.5 GiB; cloud-init grows it
# the parts of issue 13 this scenario drives (other branches until merged)
PARTS = ("appliance.compute.resources", "appliance.compute.reconcile",
         "appliance.network.ports", "appliance.network.reconcile")


def missing():
    """Why the scenario cannot run here (a reason to skip), or None."""
    reason = unavailable()
    if reason:
        return reason
    for module in PARTS:
        try:
            importlib.import_module(module)
        except ImportError as e:
            return f"{module} is not in this tree yet ({e}): the compute and network parts"
    return None


class NsClient(Client):
    """An API client whose connections are made inside the namespace (the API listens
    on the namespace's 127.0.0.1, which the host cannot reach)."""

    def __init__(self, ns, port, token=None):
        super().__init__("127.0.0.1", port, token)
        self.ns = ns

    def request(self, *args, **kwargs):
        with self.ns.inside():
            return super().request(*args, **kwargs)

    def with_token(self, token):
        return NsClient(self.ns, self.port, token)


class ImageServer:
    """build/images/ over HTTP on the namespace's 127.0.0.1: the images are plain http
    URLs, as a user gives them (a `file://` URL would be admin-only)."""

    def __init__(self, ns):
        handler = functools.partial(_QuietHandler, directory=qemu.IMAGES)
        with ns.inside():        # the listening socket is made in there, served from here
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, image):
        return f"http://127.0.0.1:{self.port}/{os.path.relpath(image.qcow2, qemu.IMAGES)}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Env:
    """The running scenario: the namespace, the appliance's settings, an admin client."""

    def __init__(self, ns, settings, admin, images, services, workdir):
        self.ns, self.settings, self.admin = ns, settings, admin
        self.images, self.services, self.workdir = images, services, workdir

    # -- waiting

    def wait(self, what, check, timeout, interval=1.0):
        """Poll check() until it returns something true (returned); TimeoutError naming
        `what`, with the services' and libvirtd's log tails, after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {timeout} s\n{self.logs()}")
            time.sleep(interval)

    def logs(self):
        parts = [f"--- {s.name} log:\n{s.log_text()}" for s in self.services]
        return "\n".join(parts + [f"--- libvirtd:\n{self.ns.log()}"])

    # -- API steps

    def ok(self, resp, *statuses):
        assert resp.status in (statuses or (200, 201)), f"{resp}\n{self.logs()}"
        return resp.json

    def register_hypervisor(self):
        hv = self.ok(self.admin.post("/v1/compute/hypervisors/", {
            "name": "netns", "driver_spec": {"kind": "libvirt", "connection_uri": self.ns.uri}}))

        def active():
            rec = self.ok(self.admin.get(f"/v1/compute/hypervisors/{hv['uuid']}"))
            assert rec["status"] != "ERROR", rec
            return rec if rec["status"] == "ACTIVE" else None
        return self.wait("the hypervisor ACTIVE", active, 120)

    def ssh_key(self, name):
        """An SSH key of the admin project (the compute daemon puts the project's keys in
        its nodes' seeds: docs/compute-daemon.md); the private key in a 0600 file."""
        key = self.ok(self.admin.post("/v1/secret/ssh_keys/", {
            "project_id": ADMIN_PROJECT, "name": name}))
        path = os.path.join(self.workdir, f"{name}.key")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(key["private_key"])
        return path

    def create_node(self, image, name, **fields):
        """POST of a node of `image` (an Image of tests/image/qemu.py) in the admin project,
        with an SSH key targeting it. Returns (node uuid, key file, the POST's monotonic time)."""
        node_uuid = new_uuid()
        key = self.ssh_key(f"{name}-key")
        posted = time.monotonic()
        self.ok(self.admin.post("/v1/compute/nodes/", {
            "uuid": node_uuid, "project_id": ADMIN_PROJECT, "name": name, "hostname": name,
            "cores": 1, "ram": 1024,
            "disk_spec": {"kind": "root_disk", "size": DISK_GB, "image": self.images.url(image)},
            **fields}), 201)
        return node_uuid, key, posted

    def wait_booted(self, node_uuid, key, posted):
        """Wait for the node ACTIVE, its DHCP lease and SSH with the key; returns the
        node's record and the seconds from the POST to the lease and to SSH."""
        node = self.wait_node(node_uuid, "the node ACTIVE with an address")
        ipv4, mac = node["default_network"]["ipv4"], node["default_network"]["mac"]
        lease = self.wait("a DHCP lease for the node's MAC", lambda: self.dhcp()[1].get(mac),
                          BOOT_TIMEOUT, interval=0.5)
        to_lease = time.monotonic() - posted
        assert lease == ipv4, f"the lease is {lease}, IPAM gave {ipv4}"
        self.wait_ssh(ipv4, key, "SSH to the node with the key given through the API",
                      node_uuid=node_uuid)
        return node, to_lease, time.monotonic() - posted

    def node(self, node_uuid):
        return self.ok(self.admin.get(f"/v1/compute/nodes/{node_uuid}"))

    def wait_node(self, node_uuid, what, timeout=BOOT_TIMEOUT, since=None):
        """Wait for the node ACTIVE with its address (a status write after `since`:
        an update's ACTIVE, not the one before it); ERROR fails at once with the reason."""
        def active():
            rec = self.node(node_uuid)
            assert rec["status"] != "ERROR", f"{what}: {rec['status_reason']}\n{self.logs()}"
            fresh = since is None or rec["updated_at"] > since
            return rec if fresh and rec["status"] == "ACTIVE" and rec["default_network"].get(
                "ipv4") else None
        return self.wait(what, active, timeout)

    def console(self, node_uuid):
        return self.ok(self.admin.get(f"/v1/compute/nodes/{node_uuid}/actions/console"))["log"]

    def wait_marker(self, node_uuid, ipv4, what, timeout=BOOT_TIMEOUT, count=1):
        """The seed's serial line `APPLIANCE-NODE-READY <uuid> <ipv4>` seen `count` times."""
        line = f"{MARKER} {node_uuid} {ipv4}"
        return self.wait(what, lambda: self.console(node_uuid).count(line) >= count, timeout)

    def move(self, node_uuid, target, timeout=600):
        """The action migrate to hypervisor `target` through the API, waited for to its
        end: "done", with a progress that only went up, to 100. Returns the node."""
        self.ok(self.admin.post(f"/v1/compute/nodes/{node_uuid}/actions/migrate/invoke",
                                {"hypervisor": target}))
        seen = []

        def ended():
            rec = self.node(node_uuid)
            m = rec["migration"]
            if m["progress"] is not None and (not seen or seen[-1] != m["progress"]):
                seen.append(m["progress"])
            return rec if m["state"] not in ("requested", "running") else None
        rec = self.wait(f"the move of {node_uuid} to {target} to end", ended, timeout,
                        interval=0.3)
        assert rec["migration"]["state"] == "done", rec["migration"]
        assert seen == sorted(seen) and seen[-1] == 100, seen
        return rec

    # -- what libvirt and the guest say (checks of the API's word)

    def domains_of(self, node_uuid):
        """Names of the namespace's libvirt domains carrying the node's mark."""
        return list(domains_in(self.ns, node_uuid))

    def dhcp(self):
        """{mac: (ip, network)} of every fixed DHCP host entry, and {mac: ip} of the leases,
        over the namespace's libvirt networks."""
        conn = self.ns.connect()
        try:
            hosts, leases = {}, {}
            for net in conn.listAllNetworks():
                for h in ET.fromstring(net.XMLDesc()).iter("host"):
                    if h.get("mac"):
                        hosts[h.get("mac")] = (h.get("ip"), net.name())
                if net.isActive():
                    for lease in net.DHCPLeases():
                        leases[lease["mac"]] = lease["ipaddr"]
            return hosts, leases
        finally:
            conn.close()

    def ssh(self, ipv4, key, command, timeout=60):
        return self.ns.ssh(ipv4, key, command, user=SSH_USER, timeout=timeout)

    def wait_ssh(self, ipv4, key, what, timeout=BOOT_TIMEOUT, node_uuid=None):
        def ok():
            # a guest that found no seed never takes the key: say so now, not at the timeout
            if node_uuid and NO_SEED in self.console(node_uuid):
                raise AssertionError(f"{what}: cloud-init found no NoCloud seed ({NO_SEED}); "
                                     f"console tail:\n{self.console(node_uuid)[-2000:]}")
            try:
                return self.ssh(ipv4, key, "true", timeout=30).returncode == 0
            except Exception:              # a timed-out ssh while sshd starts: try again
                return False
        return self.wait(what, ok, timeout, interval=2)


@contextlib.contextmanager
def appliance_in_netns(workdir):
    """The API and the compute daemon started as the supervisor starts them, but by
    `ip netns exec` inside a fresh Netns, over a new state directory with isolated
    networks; an image server in there too. All stopped and removed afterwards."""
    with Netns() as ns:
        # the API on every address of the namespace: a node's agent reaches it at its
        # network's gateway (appliance/agent/credentials.py, agent_endpoint), as on a real
        # hypervisor; the namespace has no route out, so nothing outside can
        settings = settings_for(os.path.join(workdir, "state"), network_routing="isolated",
                                api_host="0.0.0.0")
        port = settings["api_port"]
        images, services = ImageServer(ns), []
        prefix = ns.command([])

        def api_ready(service):
            try:
                with ns.inside():
                    return http_get(port, "/v1/health")[0] == 200
            except OSError:
                return False
        try:
            services.append(Service("api", settings, api_ready, prefix=prefix))
            services.append(Service("compute", settings, daemon_ready, prefix=prefix))
            with ns.inside():
                token = login(port, "admin", settings["admin_password"])
            yield Env(ns, settings, NsClient(ns, port, token), images, services, workdir)
        finally:
            for service in reversed(services):
                service.stop()
                service.remove_log()
            images.close()


class SecondMachine:
    """A second hypervisor host for an Env: its own namespace with libvirtd and an sshd,
    joined to the appliance's namespace by a veth pair (`OWN_ADDRESS` <->
    `ADDRESS`, the only path between them), reached as `uri` over qemu+ssh with the
    appliance's key (authorized for root) and `host_key` pinned, as an operator adds one
    (docs/compute.md, "Remote hypervisors")."""

    ADDRESS, OWN_ADDRESS = "10.99.0.2", "10.99.0.1"

    def __init__(self, env, ns):
        self.env, self.ns = env, ns
        self.uri = f"qemu+ssh://root@{self.ADDRESS}/system"
        self.appliance_end, self.end = env.ns.link(ns, self.OWN_ADDRESS, self.ADDRESS)
        # the key the appliance gives: any hypervisor's record shows it
        key = env.ok(env.admin.get("/v1/compute/hypervisors/"))[0]["ssh_public_key"]
        ns.start_sshd(self.ADDRESS, [key])
        self.host_key = self.keyscan()

    def keyscan(self):
        """The host key as the docs tell an operator to read it: ssh-keyscan, from the
        appliance's side, without the host name it prints first."""
        def scanned():
            out = self.env.ns.run(["ssh-keyscan", "-T", "5", "-t", "ed25519", self.ADDRESS])
            lines = [line for line in out.stdout.splitlines() if not line.startswith("#")]
            return lines[0].split(None, 1)[1] if lines else None
        return self.env.wait("ssh-keyscan of the second machine", scanned, 60)

    def set_reachable(self, up):
        """The second machine's end of the link up or down: to the appliance it is gone
        (no route), while its libvirtd and guests run on."""
        self.ns.set_link(self.end, up)

    def domains_of(self, node_uuid):
        return domains_in(self.ns, node_uuid)


@contextlib.contextmanager
def second_machine(env):
    with Netns(prefix="apt2") as ns:
        yield SecondMachine(env, ns)


def domains_in(ns, node_uuid):
    """{name: running id} of the namespace's libvirt domains carrying the node's mark."""
    import libvirt     # imported by the tests that boot (tcg.missing() checks it first)
    conn = ns.connect()
    try:
        found = {}
        for dom in conn.listAllDomains():
            try:
                mark = ET.fromstring(dom.XMLDesc()).find(f"metadata/{{{NODE_NS}}}node")
                if mark is not None and mark.get("uuid") == node_uuid:
                    found[dom.name()] = dom.ID()
            except libvirt.libvirtError:
                continue    # undefined between the listing and this read: a delete or a
                            # move under way; not there any more
        return found
    finally:
        conn.close()


def new_uuid():
    return str(uuidlib.uuid4())
