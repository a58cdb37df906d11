"""The appliance registers itself in its own compute records (issue 12, first boot):

- its local libvirt as a `compute_hypervisors` record (`qemu:///system`), where libvirt is
  installed: its socket exists. Whether libvirt *works* is the compute daemon's to find
  out, as for any hypervisor: it moves the record from IN_PROGRESS to ACTIVE (capacity
  filled in) or ERROR (the libvirt error). Asking libvirt here would start libvirtd on
  the way to the API, seconds of every boot under TCG;
- itself as a `compute_nodes` record of the admin project, node_type HW, named after the
  host, ACTIVE, with its `default_network` read from the first NIC.

Written straight into the store (first boot runs before the API) with the field names of
the compute API (docs/compute.md). Idempotent across boots: a hypervisor with the same
connection URI (made here or through the API) is left as it is; the node is found by its
name, type and project, and only its `default_network`, cores and RAM follow the box (DHCP
may hand it another address after a reboot).
"""

import json
import logging
import os
import socket
import subprocess

from appliance.agent.credentials import AGENTS, issue_credential, same
from appliance.kinds import ADMIN_PROJECT, COMPUTE_HYPERVISORS, COMPUTE_NODES
from state import DuplicateKey

log = logging.getLogger("appliance.firstboot")

LOCAL_URI = "qemu:///system"
HYPERVISORS = COMPUTE_HYPERVISORS
NODES = COMPUTE_NODES
LOOPBACK = "lo"


def _ip_json(*args):
    out = subprocess.run(["ip", "-j", "-4", *args], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return json.loads(out or "[]")


def first_nic(addresses=None, routes=None, dns=None, sys_net="/sys/class/net"):
    """The first non-loopback interface with an IPv4 address, as a node's default_network
    (network, subnet and port are the platform's records: none for the box itself).
    `addresses` and `routes` are `ip -j -4 addr` / `ip -j -4 route show default` output
    (read from the system when None). None when no interface has an address."""
    addresses = _ip_json("addr", "show") if addresses is None else addresses
    for link in addresses:
        name = link.get("ifname")
        infos = [a for a in link.get("addr_info", []) if a.get("family", "inet") == "inet"]
        if name == LOOPBACK or not infos:
            continue
        routes = _ip_json("route", "show", "default") if routes is None else routes
        gateway = next((r.get("gateway") for r in routes
                        if r.get("dev") == name and r.get("gateway")), None)
        return {"network": None, "subnet": None, "port": None,
                "ipv4": infos[0]["local"], "mask": infos[0]["prefixlen"],
                "mac": link.get("address") or _read(os.path.join(sys_net, name, "address")),
                "gateway": gateway, "dns": dns if dns is not None else name_server()}
    return None


def name_server(leases="/run/systemd/netif/leases", resolv="/etc/resolv.conf"):
    """The first DNS server DHCP gave (systemd-networkd's lease; the image has no
    resolved to write resolv.conf), else resolv.conf's."""
    try:
        for lease in sorted(os.listdir(leases)):
            for line in (_read(os.path.join(leases, lease)) or "").splitlines():
                if line.startswith("DNS="):
                    return line[4:].split()[0]
    except OSError:
        pass
    for line in (_read(resolv) or "").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            return parts[1]
    return None


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def memory_mb(meminfo="/proc/meminfo"):
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return None


def register_hypervisor(store, uri=LOCAL_URI):
    """The local libvirt's record, once. Returns (record, created)."""
    hypervisors = store.collection(HYPERVISORS, unique=[("connection_uri",)])
    existing = hypervisors.find_one(connection_uri=uri)
    if existing is not None:
        return existing, False
    record = {"name": "local", "description": "this appliance's own libvirt",
              "driver_spec": {"kind": "libvirt", "connection_uri": uri,
                              "storage_pool": "default", "machine_prefix": "vm-"},
              "connection_uri": uri, "agent": None, "builder": None, "machine_type": "VM",
              "cores_ratio": 1.0, "ram_ratio": 1.0, "status": "IN_PROGRESS",
              "status_reason": None, "all_cores": None, "all_ram": None, "all_disk": None,
              "avail_cores": None, "avail_ram": None, "avail_disk": None, "accel": None,
              "accel_reason": None}
    try:
        return hypervisors.insert(record), True
    except DuplicateKey:        # made through the API in between
        return hypervisors.find_one(connection_uri=uri), False


def register_self(store, hostname, network, cores, ram):
    """This box as a HW node of the admin project. Returns (record, created)."""
    nodes = store.collection(NODES)
    key = {"name": hostname, "node_type": "HW", "project_id": ADMIN_PROJECT}
    facts = {"cores": cores, "ram": ram, "hostname": hostname, "default_network": network or {}}
    existing = nodes.find_one(**key)
    if existing is not None:
        if existing.get("address"):
            # an address the operator set (docs/compute.md) wins over the NIC's
            facts.pop("default_network")
        changes = {k: v for k, v in facts.items() if existing.get(k) != v}
        if changes:
            existing = nodes.update(existing["uuid"], changes)
        return existing, False
    record = {**key, **facts, "description": "the appliance itself", "disk_spec": None,
              "placement_policies": [], "network": None, "hypervisor": None,
              "node_set": None, "power_state": "on", "reboot_requested_at": None,
              "status": "ACTIVE", "status_reason": None}
    return nodes.insert(record), True


def register(store, libvirt_socket, hostname=None, network=None, cores=None, ram=None):
    """Both records (the hypervisor only where `libvirt_socket` exists); what is not
    given is read from this machine."""
    if os.path.exists(libvirt_socket):
        hypervisor, made = register_hypervisor(store)
        log.info("local libvirt %s hypervisor %s", "registered as" if made else "is",
                 hypervisor["uuid"])
    else:
        log.info("no libvirt here (%s is missing): no hypervisor registered", libvirt_socket)
    hostname = hostname or socket.gethostname()
    node, made = register_self(store, hostname, network if network is not None else first_nic(),
                               cores or os.cpu_count() or 1, ram or memory_mb())
    log.info("this appliance %s node %s (%s)", "registered as" if made else "is",
             node["uuid"], hostname)
    return node


def local_endpoint(settings):
    """The API as the appliance's own agent reaches it: plain HTTP on loopback."""
    host = settings["api_host"]
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{settings['api_port']}"


def enroll_self(store, node, settings, path):
    """The appliance's own node agent: its credential file at `path` (0600), made once and
    kept across boots while the agent record still matches it (a re-enrollment by token,
    or a lost file, makes a new one). Returns True when it wrote the file."""
    try:
        with open(path) as f:
            current = json.load(f)
        agent = store.collection(AGENTS).get(current.get("agent") or "")
        if agent is not None and agent.get("node") == node["uuid"] and same(
                current.get("secret"), agent.get("secret_hash")):
            return False
    except (OSError, ValueError, AttributeError):
        pass
    cred = issue_credential(store, node["uuid"], name="appliance")
    from appliance.files import write_file  # noqa: PLC0415 (stdlib only)
    path = os.path.abspath(path)
    write_file(path, json.dumps({"endpoint": local_endpoint(settings), **cred}, indent=1)
               + "\n", 0o600, private=(os.path.dirname(path), None, 0o700))
    log.info("this appliance's node agent %s enrolled (%s)", cred["agent"], path)
    return True
