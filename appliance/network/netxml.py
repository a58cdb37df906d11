"""A network record and its ports -> libvirt network XML, and back: pure.

The network gets its own bridge; the host holds the gateway (.1) and the DNS address (.2)
on it, where libvirt's dnsmasq answers DHCP and DNS. DHCP hands out only the fixed host
entries (one per port: its MAC gets its IPv4), within the lease range. `<forward
mode='nat'/>` only for routing "nat"; without `<forward>` libvirt builds an isolated
network that nothing can leave.
"""

import ipaddress
import xml.etree.ElementTree as ET

PREFIX = "appliance-"
DNSMASQ_NS = "http://libvirt.org/schemas/network/dnsmasq/1.0"


def network_name(network_uuid):
    return PREFIX + network_uuid


def host_entries(ports):
    """The DHCP host entries of ports, sorted by address: {mac, ip, name}."""
    hosts = [{"mac": p["mac"], "ip": p["ipv4"], "name": f"node-{p['node']}"} for p in ports]
    return sorted(hosts, key=lambda h: tuple(int(x) for x in h["ip"].split(".")))


def host_xml(host):
    element = ET.Element("host", {k: host[k] for k in ("mac", "ip", "name") if host.get(k)})
    return ET.tostring(element, encoding="unicode")


def network_xml(network, hosts):
    """The libvirt XML of a network record with these host entries."""
    ET.register_namespace("dnsmasq", DNSMASQ_NS)
    root = ET.Element("network")
    ET.SubElement(root, "name").text = network_name(network["uuid"])
    if network["routing"] == "nat":
        ET.SubElement(root, "forward", mode="nat")
    ET.SubElement(root, "bridge", name=network["bridge"], stp="on", delay="0")
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


def shape(xml):
    """What of a network's XML must match for it to be ours as is (not the host entries,
    which change live): bridge, forward mode, addresses and lease range."""
    root = ET.fromstring(xml)
    forward = root.find("forward")
    bridge = root.find("bridge")
    ips = []
    for ip in root.findall("ip"):
        lease = ip.find("dhcp/range")
        ips.append((ip.get("address"), ip.get("netmask") or ip.get("prefix"),
                    None if lease is None else (lease.get("start"), lease.get("end"))))
    return {"bridge": None if bridge is None else bridge.get("name"),
            "forward": None if forward is None else forward.get("mode"), "ips": ips}


def hosts(xml):
    """The DHCP host entries of a network's XML: {mac, ip, name} (name None if unset)."""
    root = ET.fromstring(xml)
    return [{"mac": h.get("mac"), "ip": h.get("ip"), "name": h.get("name")}
            for h in root.findall("ip/dhcp/host")]

