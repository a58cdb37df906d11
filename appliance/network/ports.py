"""Ports: a node's address and MAC on its network (the functions crec's reconciler calls).

`allocate` is safe between processes: it reads the addresses in use, takes the lowest free
one and inserts, all under the ports kind's cross-process lock; the store's unique keys
(network, ipv4), (mac) and (node) refuse any duplicate whatever the path, and a MAC that
collides is drawn again (docs/network.md).
"""

import random
import time

from appliance.kinds import COMPUTE_NODES
from state import DuplicateKey

from . import ipam
from .networks import NetworkError, NotFoundError, default_of_project, holds, networks, ports

MAC_ATTEMPTS = 16
# libvirt's dnsmasq leases for an hour (no expiry in our network XML) and keeps a departed
# guest's lease until then, refusing its fixed address to another MAC ("not using
# configured address ... because it is leased to ..."): a released address waits that
# long, plus a margin, before another node is given it, while fresh ones remain
HOLD_SECONDS = 3600 + 300


class AddressesExhausted(NetworkError):
    pass


def random_mac():
    """A MAC of QEMU's locally administered prefix, as the reference gives VMs."""
    return "52:54:00:" + ":".join(f"{random.randrange(256):02x}" for _ in range(3))


def network_of(store, settings, node):
    """The network a node's port goes on: the one it names, else its project's default."""
    if node.get("network"):
        network = networks(store).get(node["network"])
        if network is None or network["project_id"] != node["project_id"]:
            raise NotFoundError(f"network {node['network']} not found in project "
                                f"{node['project_id']}")
        return network
    return default_of_project(store, settings, node["project_id"])


def operator_addresses(store):
    """The addresses operators gave HW nodes (their `address`, docs/compute.md): a
    bare-metal machine already holds it on its network, so no VM may lease it."""
    return [n["address"] for n in store.collection(COMPUTE_NODES).by("node_type", "HW")
            if n.get("address")]


def allocate(store, settings, node):
    """The node's port, made on first call: the lowest free address of its network and a
    fresh MAC. Raises NotFoundError (no such network), AddressesExhausted (none left)."""
    coll = ports(store)
    found = coll.by("node", node["uuid"])
    if found:
        return dict(found[0])
    network = network_of(store, settings, node)
    net_layout = ipam.layout(network["cidr"])
    # the choice and the insert under the ports lock: creators that chose optimistically
    # and lost to the unique key did the work again, slower at 6 processes than waiting
    # (docs/network.md); a network is deleted under this lock too, so none is orphaned
    with coll.lock:
        found = coll.by("node", node["uuid"])
        if found:
            return dict(found[0])
        if networks(store).get(network["uuid"]) is None:
            raise NotFoundError(f"network {network['uuid']} was deleted")
        used = [p["ipv4"] for p in coll.by("network", network["uuid"])] + \
            operator_addresses(store)
        held = _held(store, network["uuid"])
        ipv4 = ipam.lowest_free(net_layout, used + list(held))
        if ipv4 is None:
            # none fresh: the one released longest ago (its old lease the likeliest gone)
            taken = set(used)
            ipv4 = next((a for a in sorted(held, key=held.get) if a not in taken), None)
        if ipv4 is None:
            raise AddressesExhausted(
                f"network {network['name'] or network['uuid']} ({network['cidr']}) has no "
                f"free address: all {ipam.lease_count(net_layout)} from "
                f"{net_layout['dhcp_start']} to {net_layout['dhcp_end']} are taken")
        record = {"network": network["uuid"], "node": node["uuid"],
                  "project_id": node["project_id"], "ipv4": ipv4, "mask": net_layout["mask"],
                  "status": "NEW"}
        # the unique keys still hold against any writer that skips the lock; inside it
        # only a MAC can collide (1 in 16 million per port in use): another one is drawn
        for attempt in range(MAC_ATTEMPTS):
            try:
                return coll.insert({**record, "mac": random_mac()})
            except DuplicateKey as e:
                if e.fields != ("mac",) or attempt == MAC_ATTEMPTS - 1:
                    raise


def release(store, node_uuid):
    """Delete the node's port; the port or None. Its address is held first (HOLD_SECONDS),
    so that no allocation takes it before the hold is there."""
    coll = ports(store)
    for port in coll.by("node", node_uuid):
        _hold(store, port)
    gone = coll.delete_where(lambda p: p["node"] == node_uuid)
    return gone[0] if gone else None


def _hold(store, port):
    record = {"network": port["network"], "ipv4": port["ipv4"], "mac": port.get("mac"),
              "released_at": time.time()}
    coll = holds(store)
    for _attempt in range(3):
        coll.delete_where(lambda h: (h["network"], h["ipv4"]) == (port["network"],
                                                                  port["ipv4"]))
        try:
            coll.insert(record)
            return
        except DuplicateKey:      # another release of the same address meanwhile: again
            continue


def _held(store, network_uuid):
    """{address: released_at} of the network's holds still running; expired ones go."""
    now, coll = time.time(), holds(store)
    current = coll.by("network", network_uuid)
    out = {h["ipv4"]: h["released_at"] for h in current
           if now - h["released_at"] < HOLD_SECONDS}
    if len(out) < len(current):
        coll.delete_where(lambda h: h["network"] == network_uuid
                          and now - h["released_at"] >= HOLD_SECONDS)
    return out


def default_network(port, network):
    """The node's `default_network` field, from its port and that port's network."""
    return {"network": network["uuid"], "subnet": network["uuid"], "port": port["uuid"],
            "ipv4": port["ipv4"], "mask": port["mask"], "mac": port["mac"],
            "gateway": network["gateway"], "dns": network["dns"]}
