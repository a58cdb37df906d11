"""The libvirt network step: one hypervisor's networks brought in line with the store.

Run by the compute daemon (crec's reconciler) on every pass, per hypervisor. Level
triggered and idempotent: a pass over an unchanged store touches neither libvirt nor the
store. Only networks named `appliance-<uuid>` are ever changed; others are left alone.

A network whose nodes run on several hypervisors with underlay addresses spans them
(docs/network.md, "Networks across hypervisors"): its home hypervisor (the first that ran
a node of it, kept in the record) holds the gateway, DNS and every port's DHCP entry;
each other one a bare bridge of the same name; the libvirt network hook (vxlan_hook.py)
joins them by the network's VXLAN id. `plan` decides a hypervisor's part, pure.
"""

import logging

import libvirt

from appliance.kinds import COMPUTE_HYPERVISORS, COMPUTE_NODES

from . import netxml
from .networks import ensure_vni, networks, ports

log = logging.getLogger("appliance.network")
NODES = COMPUTE_NODES
HOST_SECTION = libvirt.VIR_NETWORK_SECTION_IP_DHCP_HOST
PEER_SECTION = libvirt.VIR_NETWORK_SECTION_PORTGROUP


def underlay_of(hypervisor):
    return ((hypervisor or {}).get("driver_spec") or {}).get("underlay_address")


def plan(network, users, hypervisors, here):
    """This hypervisor's part in a network, pure: (role, ports whose DHCP entry it holds,
    VXLAN peers, wanted). `users`: {hypervisor uuid: ports of nodes placed there};
    `hypervisors`: {uuid: record}; the network's `home_hypervisor` (None: it has none,
    and this hypervisor runs none of its nodes).

    role "home": the addresses, DHCP and dnsmasq; its ports and those of every member.
    role "member": a bare bridge joined to the home's by the VXLAN (this hypervisor and
    the home both have an underlay address). role "alone": a hypervisor outside the
    underlay running nodes of a network homed elsewhere: a network of its own, as before
    VXLAN (same addresses, its own DHCP, not joined). `wanted`: it has a port to serve
    (else a network defined here is only kept in step, never defined or started).
    peers: the other carriers' underlay addresses, where this one and the home have one."""
    home = network["home_hypervisor"]
    address = {h: underlay_of(hypervisors.get(h)) for h in set(users) | {home, here}}
    spanning = bool(address[home]) and bool(address[here]) and network.get("vni") is not None
    members = sorted(h for h in users if h != home and address[h]) if spanning else []

    def peers(carriers):
        return sorted({address[h] for h in carriers} - {address[here]})

    if here == home:
        served = list(users.get(here, ())) + [p for h in members for p in users[h]]
        return "home", served, peers(members), bool(served)
    if spanning:
        return "member", [], peers([home, *members]), here in users
    return "alone", list(users.get(here, ())), [], here in users


def reconcile_networks(store, conn, hypervisor, arriving=()):
    """Define and start every network with ports of nodes placed on `hypervisor` (a record
    or its uuid), or homed there, on its libvirt connection `conn`, as `plan` says: a
    fixed DHCP host entry per port served and the VXLAN peers, both changed live; drop the
    host entries of ports gone; remove our networks whose record is gone; write the
    networks' and ports' status. `arriving`: nodes being moved here from another
    hypervisor (compute's migrate), counted as placed here, so that this side's networks
    (and, where it serves them, its DHCP host entries) are in place before they run here."""
    hv_uuid = hypervisor["uuid"] if isinstance(hypervisor, dict) else hypervisor
    hypervisors = {h["uuid"]: h for h in store.collection(COMPUTE_HYPERVISORS).records()}
    # the one this pass runs on exists, recorded or not (tests pass a bare uuid)
    hypervisors.setdefault(hv_uuid, hypervisor if isinstance(hypervisor, dict)
                           else {"uuid": hv_uuid})
    placed = {n["uuid"]: n["hypervisor"] for n in store.collection(NODES).records()
              if n.get("hypervisor")}
    users = {}                      # network uuid -> {hypervisor uuid: ports placed there}
    port_coll = ports(store)
    # a node being moved here is this side's before it runs here (compute's migrate)
    placed.update((node["uuid"], hv_uuid) for node in arriving)
    for port in port_coll.records():
        if port["node"] in placed:
            users.setdefault(port["network"], {}).setdefault(
                placed[port["node"]], []).append(port)
    net_coll = networks(store)
    defined = {net.name(): net for net in conn.listAllNetworks()}
    homed_here = {n["uuid"] for n in net_coll.by("home_hypervisor", hv_uuid)}
    net_status, port_status = {}, {}
    for uuid in {u for u, by_hv in users.items() if hv_uuid in by_hv} | homed_here | {
            name[len(netxml.PREFIX):] for name in defined if name.startswith(netxml.PREFIX)}:
        network = net_coll.get(uuid)
        existing = defined.get(netxml.network_name(uuid))
        if network is None:
            _remove(existing, "its record is gone")
            continue
        its_users = users.get(uuid, {})
        network = _with_home(store, network, hypervisors, hv_uuid, its_users)
        if network is None:         # deleted meanwhile
            _remove(existing, "its record is gone")
            continue
        network = ensure_vni(store, network)
        if network is None:
            continue
        role, served, peers, wanted = plan(network, its_users, hypervisors, hv_uuid)
        # the MACs of this hypervisor's nodes on it, whatever its role: their taps are
        # plugged back by the hook when the network is defined again under them
        plugs = [p["mac"] for p in its_users.get(hv_uuid, ())]
        try:
            _ensure(conn, network, existing, served, peers, role != "member", wanted,
                    plugs)
        except libvirt.libvirtError as e:
            log.warning("network %s on hypervisor %s: %s", uuid, hv_uuid, e)
            net_status[uuid] = {"status": "ERROR", "status_reason": str(e)}
            continue
        if wanted:
            net_status[uuid] = {"status": "ACTIVE", "status_reason": None}
            port_status.update({p["uuid"]: {"status": "ACTIVE"} for p in served})
    _write(net_coll, net_status)
    _write(port_coll, port_status)


def _with_home(store, network, hypervisors, hv_uuid, its_users):
    """The network with its `home_hypervisor`: kept while that hypervisor exists, else
    this one when it runs a node of it (compare and set: of two passes at once, one wins
    and the other reads it). Seen with no home (None) when it has none and none is due
    here: then nothing of it is wanted here."""
    if network.get("home_hypervisor") in hypervisors:
        return network
    if hv_uuid not in its_users:
        return {**network, "home_hypervisor": None}
    coll = networks(store)
    # a record that moved meanwhile (a rename through the API) is read again and retried:
    # a pass without a home would define the network here as "alone", then again as home
    for _ in range(5):
        coll.update_many({network["uuid"]: (network["revision"],
                                            {"home_hypervisor": hv_uuid})})
        network = coll.get(network["uuid"])
        if network is None or network.get("home_hypervisor") in hypervisors:
            return network
    return {**network, "home_hypervisor": hv_uuid}


def _ensure(conn, network, net, served, peers, home, wanted, plugs=()):
    """The network defined as the plan says, running, with exactly these host entries and
    VXLAN peers. A network of ours not wanted here is only kept in step, never defined or
    started. `plugs`: the MACs of the nodes here on it, written into each definition for
    the hook, which plugs their taps into the bridge when it starts: libvirt's destroy
    of a network leaves its running guests' taps on no bridge (docs/network.md)."""
    hosts = netxml.host_entries(served) if home else []
    desired = netxml.network_xml(network, hosts, peers=peers, home=home, plugs=plugs)
    if net is not None and netxml.shape(net.XMLDesc(0)) != netxml.shape(desired):
        _remove(net, "it differs from its record; defined again")
        net = None
    elif (net is not None and wanted and not net.isActive()
          and netxml.plugs(net.XMLDesc(0)) != sorted(m.lower() for m in plugs)):
        # stopped (by hand, or it failed): its definition gets today's nodes before it
        # starts, so that the hook plugs back those that still run (metadata cannot
        # change live before libvirt 9.7; an inactive network's definition can)
        net = conn.networkDefineXML(netxml.with_uuid(desired, net.UUIDString()))
    if net is None:
        if not wanted:
            return
        log.info("defining network %s (bridge %s, %s%s%s)",
                 netxml.network_name(network["uuid"]), network["bridge"], network["cidr"],
                 "" if not peers else f", vxlan {network['vni']} to {', '.join(peers)}"
                 + ("" if home else ", a bare bridge"),
                 f"; {len(plugs)} node(s) here to plug in" if plugs else "")
        net = conn.networkDefineXML(desired)
        # up again after a host restart, before libvirt starts the domains that use it
        net.setAutostart(1)
    if wanted and not net.isActive():
        net.create()
        _reclaim_ports(conn, net, network["bridge"])
    _sync_hosts(net, hosts)
    _sync_peers(net, peers)


def _reclaim_ports(conn, net, bridge):
    """The libvirt ports of the running domains on a network just started, created again
    (VIR_NETWORK_PORT_CREATE_RECLAIM: recorded, nothing plugged; the hook has plugged
    the taps): a network destroyed and started under them lost its ports, and a domain's
    stop would then find none to release. Bookkeeping only: a failure is logged, never
    the network's."""
    try:
        held = {p.UUIDString() for p in net.listAllPorts()}
        domains = conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:    # the test driver's
            log.warning("network %s: cannot list its ports: %s", net.name(), e)
        return
    for dom in domains:
        try:
            nics = netxml.domain_ports(dom.XMLDesc(0), net.name())
            for nic in nics:
                if nic["portid"] not in held:
                    net.portCreateXML(netxml.port_xml(nic["portid"], dom.name(),
                                                      dom.UUIDString(), nic["mac"], bridge),
                                      libvirt.VIR_NETWORK_PORT_CREATE_RECLAIM)
                    log.info("network %s: port of %s (%s) reclaimed", net.name(),
                             dom.name(), nic["mac"])
        except libvirt.libvirtError as e:
            log.warning("network %s: cannot reclaim the port of %s: %s", net.name(),
                        dom.name(), e)


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


def _sync_peers(net, peers):
    """The VXLAN peers (portgroups) changed live and in the definition: libvirt hands the
    new XML to the hook ("updated"), which brings the tunnel's flood list to it."""
    current = netxml.peers(net.XMLDesc(0))
    flags = libvirt.VIR_NETWORK_UPDATE_AFFECT_CONFIG
    if net.isActive():
        flags |= libvirt.VIR_NETWORK_UPDATE_AFFECT_LIVE
    for address in current:
        if address not in peers:
            net.update(libvirt.VIR_NETWORK_UPDATE_COMMAND_DELETE, PEER_SECTION, -1,
                       netxml.peer_xml(address), flags)
    for address in peers:
        if address not in current:
            net.update(libvirt.VIR_NETWORK_UPDATE_COMMAND_ADD_LAST, PEER_SECTION, -1,
                       netxml.peer_xml(address), flags)


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
