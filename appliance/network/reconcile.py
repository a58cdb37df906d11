"""The libvirt network step: one hypervisor's networks brought in line with the store.

Run by the compute daemon (crec's reconciler) on every pass, per hypervisor. Level
triggered and idempotent: a pass over an unchanged store touches neither libvirt nor the
store. Only networks named `appliance-<uuid>` are ever changed; others are left alone.
"""

import logging

import libvirt

from appliance.kinds import COMPUTE_NODES

from . import netxml
from .networks import networks, ports

log = logging.getLogger("appliance.network")
NODES = COMPUTE_NODES
HOST_SECTION = libvirt.VIR_NETWORK_SECTION_IP_DHCP_HOST


def reconcile_networks(store, conn, hypervisor, arriving=()):
    """Define and start every network with ports of nodes placed on `hypervisor` (a record
    or its uuid) on its libvirt connection `conn`, with a fixed DHCP host entry per port,
    changed live; drop the host entries of ports gone; remove our networks whose record is
    gone; write the networks' and ports' status. `arriving`: nodes being moved here from
    another hypervisor (compute's migrate), whose host entries are here before they run
    here, so that this side's DHCP renews their leases."""
    hv_uuid = hypervisor["uuid"] if isinstance(hypervisor, dict) else hypervisor
    local = {}                      # network uuid -> ports of nodes placed here
    port_coll = ports(store)
    for node in list(store.collection(NODES).by("hypervisor", hv_uuid)) + list(arriving):
        for port in port_coll.by("node", node["uuid"]):
            local.setdefault(port["network"], []).append(port)
    net_coll = networks(store)
    defined = {net.name(): net for net in conn.listAllNetworks()}
    net_status, port_status = {}, {}
    for uuid in set(local) | {name[len(netxml.PREFIX):] for name in defined
                              if name.startswith(netxml.PREFIX)}:
        network = net_coll.get(uuid)
        existing = defined.get(netxml.network_name(uuid))
        if network is None:
            _remove(existing, "its record is gone")
            continue
        its_ports = local.get(uuid, [])
        try:
            _ensure(conn, network, existing, its_ports)
        except libvirt.libvirtError as e:
            log.warning("network %s on hypervisor %s: %s", uuid, hv_uuid, e)
            net_status[uuid] = {"status": "ERROR", "status_reason": str(e)}
            continue
        if its_ports:
            net_status[uuid] = {"status": "ACTIVE", "status_reason": None}
            port_status.update({p["uuid"]: {"status": "ACTIVE"} for p in its_ports})
    _write(net_coll, net_status)
    _write(port_coll, port_status)


def _ensure(conn, network, net, its_ports):
    """The network defined as the record says, running, with exactly these host entries.
    A network of ours with no local port is only kept in step, never defined here."""
    hosts = netxml.host_entries(its_ports)
    desired = netxml.network_xml(network, hosts)
    if net is not None and netxml.shape(net.XMLDesc(0)) != netxml.shape(desired):
        _remove(net, "it differs from its record; defined again")
        net = None
    if net is None:
        if not its_ports:
            return
        log.info("defining network %s (bridge %s, %s)", netxml.network_name(network["uuid"]),
                 network["bridge"], network["cidr"])
        net = conn.networkDefineXML(desired)
        # up again after a host restart, before libvirt starts the domains that use it
        net.setAutostart(1)
    if its_ports and not net.isActive():
        net.create()
    _sync_hosts(net, hosts)


def _sync_hosts(net, hosts):
    """Host entries added and removed live (and in the persistent definition), so that
    running nodes keep their leases: no restart of the network."""
    current = {h["mac"]: h for h in netxml.hosts(net.XMLDesc(0))}
    wanted = {h["mac"]: h for h in hosts}
    flags = libvirt.VIR_NETWORK_UPDATE_AFFECT_CONFIG
    if net.isActive():
        flags |= libvirt.VIR_NETWORK_UPDATE_AFFECT_LIVE
    # removals first: a freed address may come back with another MAC in the same pass
    for mac, host in current.items():
        if wanted.get(mac) != host:
            net.update(libvirt.VIR_NETWORK_UPDATE_COMMAND_DELETE, HOST_SECTION, -1,
                       netxml.host_xml(host), flags)
    for mac, host in wanted.items():
        if current.get(mac) != host:
            net.update(libvirt.VIR_NETWORK_UPDATE_COMMAND_ADD_LAST, HOST_SECTION, -1,
                       netxml.host_xml(host), flags)


def _remove(net, why):
    if net is None:
        return
    log.info("removing network %s: %s", net.name(), why)
    try:
        if net.isActive():
            net.destroy()
        if net.isPersistent():
            net.undefine()
    except libvirt.libvirtError as e:
        log.warning("cannot remove network %s: %s", net.name(), e)


def _write(coll, wanted):
    """Write only what differs, each record compare-and-set: a record that moved
    meanwhile is skipped, and the next pass sees it again."""
    updates = {}
    for uuid, changes in wanted.items():
        record = coll.get(uuid)
        if record is not None and any(record.get(k) != v for k, v in changes.items()):
            updates[uuid] = (record["revision"], changes)
    if updates:
        coll.update_many(updates)
