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
                ("10.20.0.2", "255.255.252.0", None)],
        "mtu": None, "vxlan": None}
    # host entries are not part of the shape: they change live
    assert netxml.shape(netxml.network_xml(record(), [])) == netxml.shape(xml)
    assert netxml.shape(netxml.network_xml(record("nat"), [])) != netxml.shape(xml)


def test_host_xml_leaves_out_what_is_unset():
    assert ET.fromstring(netxml.host_xml({"mac": "52:54:00:00:00:01", "ip": "10.0.0.3",
                                          "name": None})).attrib == {
        "mac": "52:54:00:00:00:01", "ip": "10.0.0.3"}


PEERS = ["192.0.2.3", "192.0.2.2"]


def test_a_network_with_a_vxlan_id_carries_it_the_mtu_and_its_peers():
    xml = netxml.network_xml(dict(record("nat"), vni=4097), netxml.host_entries(PORTS),
                             peers=PEERS)
    root = ET.fromstring(xml)
    mark = root.find(f"metadata/{{{netxml.VXLAN_NS}}}vxlan")
    assert mark.attrib == {"vni": "4097"}
    assert root.find("mtu").attrib == {"size": "1450"}
    assert [p.get("name") for p in root.findall("portgroup")] == [
        "vxlan-peer-192.0.2.2", "vxlan-peer-192.0.2.3"]
    # the home keeps the gateway, DHCP and NAT
    assert root.find("forward").attrib == {"mode": "nat"}
    assert len(root.findall("ip")) == 2 and len(root.findall("ip/dhcp/host")) == 2
    assert netxml.vxlan(xml) == "4097"
    assert netxml.peers(xml) == ["192.0.2.2", "192.0.2.3"]
    # peers change live: not part of the shape, so a network starts spanning (gets its
    # first peer) without being defined again; the VXLAN id is part of it
    alone = netxml.network_xml(dict(record("nat"), vni=4097), [])
    assert netxml.peers(alone) == [] and netxml.shape(alone) == netxml.shape(xml)
    assert netxml.shape(netxml.network_xml(dict(record("nat"), vni=4098), [])) != \
        netxml.shape(xml)
    # a record from before VXLAN ids: no tunnel, no MTU
    assert netxml.shape(netxml.network_xml(record("nat"), []))["mtu"] is None


def test_a_member_is_a_bare_bridge():
    """Another hypervisor than the home: the bridge and the tunnel only; no address, no
    DHCP, no dnsmasq, no NAT (its nodes reach the gateway through the tunnel)."""
    xml = netxml.network_xml(dict(record("nat"), vni=4097), [], peers=PEERS, home=False)
    root = ET.fromstring(xml)
    assert root.find("bridge").get("name") == bridge_name(UUID)
    assert root.find("ip") is None and root.find("forward") is None
    assert root.find(f"{{{netxml.DNSMASQ_NS}}}options") is None
    assert netxml.vxlan(xml) == "4097"
    assert netxml.shape(xml)["ips"] == [] and netxml.shape(xml)["mtu"] == "1450"
    assert ET.fromstring(netxml.peer_xml("192.0.2.9")).attrib == {
        "name": "vxlan-peer-192.0.2.9"}


def test_the_nodes_to_plug_back_are_in_the_metadata_and_not_the_shape():
    """Every definition lists the MACs of this hypervisor's nodes on the network, for the
    hook (vxlan_hook.py) to plug their taps into the new bridge; the list alone never
    makes a network be defined again."""
    macs = ["52:54:00:00:00:0B", "52:54:00:00:00:0a"]
    for rec, home in ((dict(record(), vni=4097), True), (dict(record(), vni=4097), False),
                      (record(), True)):
        xml = netxml.network_xml(rec, [], home=home, plugs=macs)
        assert netxml.plugs(xml) == ["52:54:00:00:00:0a", "52:54:00:00:00:0b"]
        assert netxml.shape(xml) == netxml.shape(netxml.network_xml(rec, [], home=home))
        # the VXLAN id, where there is one, beside them
        assert netxml.vxlan(xml) == (None if rec.get("vni") is None else "4097")
    assert netxml.plugs(netxml.network_xml(record(), [])) == []
    assert ET.fromstring(netxml.network_xml(record(), [])).find("metadata") is None


def test_a_running_domains_ports_and_their_reclaim_xml():
    """What reconcile reads of a running domain (libvirt's live XML: the port each NIC
    holds) and the port it creates again after the network was defined again."""
    live = """<domain><name>node-1</name><devices>
      <interface type='network'><mac address='52:54:00:00:00:0a'/>
        <source network='appliance-x' portid='e312922a-8103-4fae-83a4-896ff1213a82'
                bridge='ap-000000000001'/></interface>
      <interface type='network'><mac address='52:54:00:00:00:0b'/>
        <source network='appliance-y' portid='1d0c1a52-9d2f-4b43-8c3e-2f2b1d4e6a70'/>
      </interface>
      <interface type='bridge'><mac address='52:54:00:00:00:0c'/>
        <source bridge='appliance-x'/></interface>
    </devices></domain>"""
    assert netxml.domain_ports(live, "appliance-x") == [
        {"portid": "e312922a-8103-4fae-83a4-896ff1213a82", "mac": "52:54:00:00:00:0a"}]
    root = ET.fromstring(netxml.port_xml("e312922a-8103-4fae-83a4-896ff1213a82", "node-1",
                                         "ebe1540c-9f31-4185-8f29-24b490ae1b31",
                                         "52:54:00:00:00:0a", "ap-000000000001"))
    assert root.tag == "networkport"
    assert root.findtext("uuid") == "e312922a-8103-4fae-83a4-896ff1213a82"
    assert (root.findtext("owner/name"), root.findtext("owner/uuid")) == (
        "node-1", "ebe1540c-9f31-4185-8f29-24b490ae1b31")
    assert root.find("mac").attrib == {"address": "52:54:00:00:00:0a"}
    assert root.find("plug").attrib == {"type": "network", "bridge": "ap-000000000001"}


def test_with_uuid_keeps_the_rest():
    xml = netxml.network_xml(dict(record(), vni=4097), [], plugs=["52:54:00:00:00:0a"])
    again = netxml.with_uuid(xml, "b11522ce-49c6-49f1-a383-4bb0270bf07e")
    root = ET.fromstring(again)
    assert [e.tag for e in root][:2] == ["name", "uuid"]
    assert root.findtext("uuid") == "b11522ce-49c6-49f1-a383-4bb0270bf07e"
    assert netxml.shape(again) == netxml.shape(xml) and netxml.plugs(again) == netxml.plugs(xml)
