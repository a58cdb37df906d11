"""A network record and its ports -> libvirt network XML, and back: pure.

The network gets its own bridge; the host holds the gateway (.1) and the DNS address (.2)
on it, where libvirt's dnsmasq answers DHCP and DNS. DHCP hands out only the fixed host
entries (one per port: its MAC gets its IPv4), within the lease range. `<forward
mode='nat'/>` only for routing "nat"; without `<forward>` libvirt builds an isolated
network that nothing can leave.

A network that spans hypervisors (docs/network.md, "Networks across hypervisors") has the
same bridge on each of them: with the addresses, DHCP and dnsmasq on its home hypervisor
only, a bare bridge elsewhere. Every network with a VXLAN id carries what the libvirt
network hook (vxlan_hook.py) needs to join it to others, whether it spans yet or not:
the id in `<metadata>` and the tunnel's MTU, fixed for the network's life; and each
peer's underlay address as an empty `<portgroup name='vxlan-peer-<address>'/>`:
portgroups are the part of a network that libvirt changes live (virNetworkUpdate) and
then hands to the hook ("updated"), so a network starts spanning, and peers come and go,
without restarting the bridge under running nodes. A network defined again (its shape
changed) lists in `<metadata>` the MACs of the nodes on this hypervisor that use it, so
that the hook plugs their taps into the new bridge (`<plug:plugs>`, a namespace
of its own: libvirt keeps one element per namespace).
"""

import ipaddress
import xml.etree.ElementTree as ET

# the names and the VXLAN marks the hypervisor's hook reads: defined by the hook, which
# runs alone on an outside hypervisor (stdlib only)
from .vxlan_hook import NETWORK_PREFIX as PREFIX, PEER_PREFIX, PLUG_NS, PLUGS, VXLAN_NS

DNSMASQ_NS = "http://libvirt.org/schemas/network/dnsmasq/1.0"
# a 1500-byte underlay less VXLAN's 50 bytes (outer IPv4, UDP, VXLAN, inner Ethernet):
# libvirt gives the nodes' interfaces this MTU (virtio tells the guest)
VXLAN_MTU = 1450


def network_name(network_uuid):
    return PREFIX + network_uuid


def host_entries(ports):
    """The DHCP host entries of ports, sorted by address: {mac, ip, name}."""
    hosts = [{"mac": p["mac"], "ip": p["ipv4"], "name": f"node-{p['node']}"} for p in ports]
    return sorted(hosts, key=lambda h: tuple(int(x) for x in h["ip"].split(".")))


def host_xml(host):
    element = ET.Element("host", {k: host[k] for k in ("mac", "ip", "name") if host.get(k)})
    return ET.tostring(element, encoding="unicode")


def peer_xml(address):
    return ET.tostring(ET.Element("portgroup", name=PEER_PREFIX + address), encoding="unicode")


def network_xml(network, hosts, peers=(), home=True, plugs=()):
    """The libvirt XML of a network record with these host entries and VXLAN peers
    (underlay addresses); `home` False: the bare bridge of a hypervisor other than the
    home. A record without a `vni` (made before VXLAN ids) gets no tunnel. `plugs`: the
    MACs of the nodes on this hypervisor that use the network, whose taps the hook puts
    back on the bridge when the network starts (not part of `shape`)."""
    ET.register_namespace("dnsmasq", DNSMASQ_NS)
    ET.register_namespace("appliance", VXLAN_NS)
    ET.register_namespace("plug", PLUG_NS)
    root = ET.Element("network")
    ET.SubElement(root, "name").text = network_name(network["uuid"])
    vni = network.get("vni")
    if vni is not None or plugs:
        metadata = ET.SubElement(root, "metadata")
        if vni is not None:
            ET.SubElement(metadata, f"{{{VXLAN_NS}}}vxlan", vni=str(vni))
        if plugs:
            listed = ET.SubElement(metadata, f"{{{PLUG_NS}}}plugs")
            for mac in sorted({m.lower() for m in plugs}):
                ET.SubElement(listed, f"{{{PLUG_NS}}}plug", mac=mac)
    if home and network["routing"] == "nat":
        ET.SubElement(root, "forward", mode="nat")
    ET.SubElement(root, "bridge", name=network["bridge"], stp="on", delay="0")
    if vni is not None:
        ET.SubElement(root, "mtu", size=str(VXLAN_MTU))
        for address in sorted(peers):
            ET.SubElement(root, "portgroup", name=PEER_PREFIX + address)
    if not home:
        return ET.tostring(root, encoding="unicode")
    mask = str(ipaddress.IPv4Network(network["cidr"]).netmask)
    ip = ET.SubElement(root, "ip", address=network["gateway"], netmask=mask)
    dhcp = ET.SubElement(ip, "dhcp")
    ET.SubElement(dhcp, "range", start=network["dhcp_start"], end=network["dhcp_end"])
    for host in hosts:
        ET.SubElement(dhcp, "host", mac=host["mac"], ip=host["ip"], name=host["name"])
    # the DNS address is the host's too, where dnsmasq answers
    ET.SubElement(root, "ip", address=network["dns"], netmask=mask)
    # dnsmasq options (the network driver keeps them, the test driver drops them): DHCP
    # names .2 as the DNS server, and answers only MACs of a host entry, so that no
    # stranger gets a dynamic lease that IPAM would then hand to a node
    options = ET.SubElement(root, f"{{{DNSMASQ_NS}}}options")
    for value in (f"dhcp-option=option:dns-server,{network['dns']}", "dhcp-ignore=tag:!known"):
        ET.SubElement(options, f"{{{DNSMASQ_NS}}}option", value=value)
    return ET.tostring(root, encoding="unicode")


def with_uuid(xml, uuid):
    """A network's XML with libvirt's uuid of it: defining a network of a name that exists
    replaces its definition only under the same uuid."""
    root = ET.fromstring(xml)
    element = ET.Element("uuid")
    element.text = uuid
    root.insert(1, element)
    return ET.tostring(root, encoding="unicode")


def shape(xml):
    """What of a network's XML must match for it to be ours as is (not the host entries
    nor the VXLAN peers, which change live): bridge, forward mode, addresses and lease
    range, MTU and VXLAN id."""
    root = ET.fromstring(xml)
    forward = root.find("forward")
    bridge = root.find("bridge")
    ips = []
    for ip in root.findall("ip"):
        lease = ip.find("dhcp/range")
        ips.append((ip.get("address"), ip.get("netmask") or ip.get("prefix"),
                    None if lease is None else (lease.get("start"), lease.get("end"))))
    mtu = root.find("mtu")
    return {"bridge": None if bridge is None else bridge.get("name"),
            "forward": None if forward is None else forward.get("mode"), "ips": ips,
            "mtu": None if mtu is None else mtu.get("size"), "vxlan": vxlan(xml)}


def vxlan(xml):
    """The VXLAN id of a network's XML (as written), or None when it has none."""
    element = ET.fromstring(xml).find(f"metadata/{{{VXLAN_NS}}}vxlan")
    return None if element is None else element.get("vni")


def peers(xml):
    """The peers' underlay addresses of a network's XML (its vxlan-peer- portgroups)."""
    return sorted(p.get("name")[len(PEER_PREFIX):]
                  for p in ET.fromstring(xml).findall("portgroup")
                  if (p.get("name") or "").startswith(PEER_PREFIX))


def plugs(xml):
    """The MACs a network's XML lists for the hook to plug back (sorted)."""
    return sorted(p.get("mac") for p in ET.fromstring(xml).findall(PLUGS))


def hosts(xml):
    """The DHCP host entries of a network's XML: {mac, ip, name} (name None if unset)."""
    root = ET.fromstring(xml)
    return [{"mac": h.get("mac"), "ip": h.get("ip"), "name": h.get("name")}
            for h in root.findall("ip/dhcp/host")]


def port_xml(port_uuid, owner_name, owner_uuid, mac, bridge):
    """A libvirt network port (`<networkport>`) of a running domain's NIC on a bridge:
    what libvirt recorded when the domain started, created again with
    VIR_NETWORK_PORT_CREATE_RECLAIM after the network was defined again (which loses its
    ports)."""
    root = ET.Element("networkport")
    ET.SubElement(root, "uuid").text = port_uuid
    owner = ET.SubElement(root, "owner")
    ET.SubElement(owner, "name").text = owner_name
    ET.SubElement(owner, "uuid").text = owner_uuid
    ET.SubElement(root, "mac", address=mac)
    ET.SubElement(root, "plug", type="network", bridge=bridge)
    return ET.tostring(root, encoding="unicode")


def domain_ports(domain_xml, name):
    """The NICs of a running domain's XML on the network `name`, with the libvirt port
    each holds: [{portid, mac}] (a NIC without a portid has none to reclaim)."""
    found = []
    for iface in ET.fromstring(domain_xml).findall("devices/interface"):
        source, mac = iface.find("source"), iface.find("mac")
        if (iface.get("type") == "network" and source is not None and mac is not None
                and source.get("network") == name and source.get("portid")):
            found.append({"portid": source.get("portid"), "mac": mac.get("address")})
    return found
