"""Network XML, pure: name, bridge, addresses, DHCP range and hosts, NAT only for nat."""

import xml.etree.ElementTree as ET

from appliance.network import netxml
from appliance.network.networks import bridge_name

UUID = "5b0c1a52-9d2f-4b43-8c3e-2f2b1d4e6a70"


def record(routing="isolated", cidr="10.20.0.0/22"):
    return {"uuid": UUID, "routing": routing, "cidr": cidr, "bridge": bridge_name(UUID),
            "gateway": "10.20.0.1", "dns": "10.20.0.2", "dhcp_start": "10.20.0.20",
            "dhcp_end": "10.20.3.254"}


PORTS = [{"mac": "52:54:00:00:00:0b", "ipv4": "10.20.0.100", "node": "n-b"},
         {"mac": "52:54:00:00:00:0a", "ipv4": "10.20.0.21", "node": "n-a"}]


def test_isolated_network_xml():
    root = ET.fromstring(netxml.network_xml(record(), netxml.host_entries(PORTS)))
    assert root.findtext("name") == f"appliance-{UUID}"
    assert root.find("forward") is None
    bridge = root.find("bridge")
    assert bridge.get("name") == "ap-5b0c1a529d2f" and len(bridge.get("name")) <= 15
    gateway, dns = root.findall("ip")
    assert (gateway.get("address"), gateway.get("netmask")) == ("10.20.0.1", "255.255.252.0")
    assert (dns.get("address"), dns.find("dhcp")) == ("10.20.0.2", None)
    lease = gateway.find("dhcp/range")
    assert (lease.get("start"), lease.get("end")) == ("10.20.0.20", "10.20.3.254")
    # sorted by address, numerically (.21 before .100)
    assert [h.attrib for h in gateway.findall("dhcp/host")] == [
        {"mac": "52:54:00:00:00:0a", "ip": "10.20.0.21", "name": "node-n-a"},
        {"mac": "52:54:00:00:00:0b", "ip": "10.20.0.100", "name": "node-n-b"}]
    options = root.findall(f"{{{netxml.DNSMASQ_NS}}}options/{{{netxml.DNSMASQ_NS}}}option")
    assert [o.get("value") for o in options] == [
        "dhcp-option=option:dns-server,10.20.0.2", "dhcp-ignore=tag:!known"]


def test_nat_network_forwards():
    root = ET.fromstring(netxml.network_xml(record("nat"), []))
    assert root.find("forward").attrib == {"mode": "nat"}
    assert root.findall("ip/dhcp/host") == []


def test_hosts_and_shape_read_back_what_was_written():
    xml = netxml.network_xml(record(), netxml.host_entries(PORTS))
    assert netxml.hosts(xml) == netxml.host_entries(PORTS)
    assert netxml.shape(xml) == {
        "bridge": "ap-5b0c1a529d2f", "forward": None,
        "ips": [("10.20.0.1", "255.255.252.0", ("10.20.0.20", "10.20.3.254")),
                ("10.20.0.2", "255.255.252.0", None)]}
    # host entries are not part of the shape: they change live
    assert netxml.shape(netxml.network_xml(record(), [])) == netxml.shape(xml)
    assert netxml.shape(netxml.network_xml(record("nat"), [])) != netxml.shape(xml)


def test_host_xml_leaves_out_what_is_unset():
    assert ET.fromstring(netxml.host_xml({"mac": "52:54:00:00:00:01", "ip": "10.0.0.3",
                                          "name": None})).attrib == {
        "mac": "52:54:00:00:00:01", "ip": "10.0.0.3"}
