"""Ports: a node's address and MAC on its network (the functions crec's reconciler calls).

`allocate` is safe between processes without a lock of its own: it reads the addresses in
use, takes the lowest free one and inserts; the store refuses the insert when another
creator took that address (unique (network, ipv4)), that MAC (unique (mac)) or already gave
this node a port (unique (node)), and the attempt is made again on the new state. The
last attempt holds the ports kind's lock, so no creator can starve (docs/network.md).
"""

import contextlib
import random
import time

from state import DuplicateKey

from . import ipam
from .networks import NetworkError, NotFoundError, default_of_project, networks, ports

ATTEMPTS = 8
MAC_ATTEMPTS = 16
PAUSE = 0.002           # seconds, at most, before another attempt: creators fall out of step


class AddressesExhausted(NetworkError):
    pass


def random_mac(rng=random):
    """A MAC of QEMU's locally administered prefix, as the reference gives VMs."""
    return "52:54:00:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(3))


def network_of(store, settings, node):
    """The network a node's port goes on: the one it names, else its project's default."""
    if node.get("network"):
        network = networks(store).get(node["network"])
        if network is None or network["project_id"] != node["project_id"]:
            raise NotFoundError(f"network {node['network']} not found in project "
                                f"{node['project_id']}")
        return network
    return default_of_project(store, settings, node["project_id"])


def allocate(store, settings, node):
    """The node's port, made on first call: the lowest free address of its network and a
    fresh MAC. Raises NotFoundError (no such network), AddressesExhausted (none left)."""
    coll = ports(store)
    found = coll.by("node", node["uuid"])
    if found:
        return dict(found[0])
    network = network_of(store, settings, node)
    net_layout = ipam.layout(network["cidr"])
    for attempt in range(ATTEMPTS):
        last = attempt == ATTEMPTS - 1
        with coll.lock if last else contextlib.nullcontext():
            found = coll.by("node", node["uuid"])
            if found:
                return dict(found[0])
            used = [p["ipv4"] for p in coll.by("network", network["uuid"])]
            ipv4 = ipam.lowest_free(net_layout, used)
            if ipv4 is None:
                raise AddressesExhausted(
                    f"network {network['name'] or network['uuid']} ({network['cidr']}) has no "
                    f"free address: all {ipam.lease_count(net_layout)} from "
                    f"{net_layout['dhcp_start']} to {net_layout['dhcp_end']} are taken")
            record = {"network": network["uuid"], "node": node["uuid"],
                      "project_id": node["project_id"], "ipv4": ipv4,
                      "mask": net_layout["mask"], "status": "NEW"}
            try:
                return _insert(store, coll, record)
            except DuplicateKey:
                if last:
                    raise       # under the lock nobody else writes ports: a bug
        time.sleep(random.uniform(0, PAUSE))
    raise NetworkError(f"no port for node {node['uuid']} after {ATTEMPTS} attempts")


def _insert(store, coll, record):
    """Insert with a fresh MAC, another one while the MAC is taken (1 in 16 million per
    port in use); DuplicateKey when the address or the node is taken meanwhile."""
    # under the ports lock: a network is deleted under it too, so no port is orphaned
    with coll.lock:
        if networks(store).get(record["network"]) is None:
            raise NotFoundError(f"network {record['network']} was deleted")
        for _ in range(MAC_ATTEMPTS - 1):
            try:
                return coll.insert({**record, "mac": random_mac()})
            except DuplicateKey as e:
                if e.fields != ("mac",):
                    raise
        return coll.insert({**record, "mac": random_mac()})


def release(store, node_uuid):
    """Delete the node's port (its address and MAC are free again); the port or None."""
    gone = ports(store).delete_where(lambda p: p["node"] == node_uuid)
    return gone[0] if gone else None


def default_network(port, network):
    """The node's `default_network` field, from its port and that port's network."""
    return {"network": network["uuid"], "subnet": network["uuid"], "port": port["uuid"],
            "ipv4": port["ipv4"], "mask": port["mask"], "mac": port["mac"],
            "gateway": network["gateway"], "dns": network["dns"]}
