"""A project network across two hypervisors, for real: two network namespaces, each with
its own libvirtd (tests/compute/netns.py) with the appliance's network hook installed as
docs/network.md tells an outside hypervisor's operator (vxlan_hook.py copied into
/etc/libvirt/hooks/network.d/), joined by a veth as their underlay (192.0.2.1 and
192.0.2.2). The networks are made by the compute daemon's network step
(reconcile_networks) from the store, as the daemon does.

The nodes' NICs are stood in for by endpoints (tests/network/endpoints.py): a network
namespace plugged into the libvirt bridge by a veth carrying the port's MAC. A guest under
TCG takes minutes to boot here; what is tested is the hypervisors' side (the bridges, the
tunnel, DHCP from the home across it, and the isolation), which a guest's NIC would meet
the same way. Project A spans both hypervisors (home on the first); project B too, with
its own VXLAN id. Slow: two libvirtds and six namespaces. The compute daemon's whole pass
spanning a network with real domains is tests/compute/test_two_hypervisors.py's, in the
shared appliance namespace.

The last tests run real domains (no OS, an empty disk) on a hypervisor of their own: their
taps, which libvirt leaves on no bridge when a network is defined again under them, are
plugged back by the hook.
"""

import concurrent.futures
import contextlib
import faulthandler
import ipaddress
import shutil
import subprocess
import uuid
import xml.etree.ElementTree as ET

import pytest

from appliance import config
from appliance.network import netxml, networks, ports, vxlan_hook
from appliance.network.reconcile import reconcile_networks
from state import Store
from tests.compute import netns

from .endpoints import ECHO_SERVER, LISTEN, VXLAN_SEND, Endpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

UNDERLAY = {"hv1": "192.0.2.1", "hv2": "192.0.2.2"}


def ip(*argv):
    done = subprocess.run(["ip", *argv], capture_output=True, text=True)
    assert done.returncode == 0, f"ip {' '.join(argv)}: {done.stderr}"
    return done.stdout


@contextlib.contextmanager
def two_hypervisors():
    """Two Netns (each libvirtd with the hook) joined by a veth, the underlay: 192.0.2.1
    and 192.0.2.2."""
    netns.require()
    with netns.Netns(prefix="hv1") as hv1, netns.Netns(prefix="hv2") as hv2:
        ip("link", "add", "underlay", "netns", hv1.name, "type", "veth",
           "peer", "name", "underlay", "netns", hv2.name)
        for ns, name in ((hv1, "hv1"), (hv2, "hv2")):
            ip("-n", ns.name, "addr", "add", f"{UNDERLAY[name]}/24", "dev", "underlay")
            ip("-n", ns.name, "link", "set", "underlay", "up")
        yield hv1, hv2


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vxlan")
    with two_hypervisors() as (hv1, hv2):
        store = Store(str(tmp / "state"))
        settings = config.load(environ={}, overrides={"state_dir": store.directory,
                                                      "network_routing": "isolated"})
        hvs = {name: store.collection("compute_hypervisors").insert({
            "name": name, "driver_spec": {"kind": "libvirt", "connection_uri": ns.uri,
                                          "underlay_address": UNDERLAY[name]}})
            for name, ns in (("hv1", hv1), ("hv2", hv2))}
        a_project, b_project = str(uuid.uuid4()), str(uuid.uuid4())
        placed = {}
        for name, project, hv in (("a1", a_project, "hv1"), ("a2", a_project, "hv2"),
                                  ("b1", b_project, "hv1"), ("b2", b_project, "hv2")):
            node = store.collection("compute_nodes").insert({
                "project_id": project, "network": None, "hypervisor": hvs[hv]["uuid"]})
            placed[name] = ports.allocate(store, settings, node)
        conns = {"hv1": hv1.connect(), "hv2": hv2.connect()}
        for name in ("hv1", "hv2"):
            reconcile_networks(store, conns[name], hvs[name])
        nets = {p: networks.networks(store).get(placed[p + "1"]["network"]) for p in "ab"}
        eps = {}
        try:
            for name, hv in (("a1", hv1), ("a2", hv2), ("b1", hv1), ("b2", hv2)):
                eps[name] = Endpoint(hv, nets[name[0]]["bridge"],
                                     placed[name]["mac"]).__enter__()
            yield {"hv1": hv1, "hv2": hv2, "conns": conns, "store": store, "hvs": hvs,
                   "ports": placed, "nets": nets, "eps": eps}
        finally:
            for ep in eps.values():
                ep.close()
            for conn in conns.values():
                conn.close()
            store.close()


def test_the_hook_makes_the_tunnel_on_both_hypervisors(site):
    for p in "ab":
        net = site["nets"][p]
        assert net["home_hypervisor"] == site["hvs"]["hv1"]["uuid"]
        dev = f"vxlan{net['vni']}"
        for name, peer in (("hv1", "192.0.2.2"), ("hv2", "192.0.2.1")):
            ns = site[name]
            details = ip("-n", ns.name, "-d", "link", "show", "dev", dev)
            assert f"vxlan id {net['vni']}" in details and f"master {net['bridge']}" in details
            assert "dstport 4789" in details and "mtu 1450" in details
            flood = subprocess.run(["ip", "netns", "exec", ns.name, "bridge", "fdb", "show",
                                    "dev", dev], capture_output=True, text=True).stdout
            assert vxlan_hook.flood_peers(flood) == [peer]
    assert site["nets"]["a"]["vni"] != site["nets"]["b"]["vni"]
    # the member's network is a bare bridge: no address of the network on hv2
    assert site["nets"]["a"]["gateway"] not in ip("-n", site["hv2"].name, "addr")
    assert site["nets"]["a"]["gateway"] in ip("-n", site["hv1"].name, "addr")


def test_dhcp_from_the_home_across_the_tunnel(site):
    """a2 runs on hv2, whose bridge has no dnsmasq: its lease comes from hv1's."""
    a = site["nets"]["a"]
    assert site["eps"]["a2"].dhcp() == (site["ports"]["a2"]["ipv4"], a["dns"], "-")
    assert site["eps"]["a1"].dhcp() == (site["ports"]["a1"]["ipv4"], a["dns"], "-")
    # B's nodes get B's leases, from B's dnsmasq, across B's tunnel
    assert site["eps"]["b2"].dhcp()[0] == site["ports"]["b2"]["ipv4"]


def test_one_projects_nodes_reach_each_other_and_another_project_reaches_neither(site):
    eps, placed, nets = site["eps"], site["ports"], site["nets"]
    prefix = nets["a"]["cidr"].split("/")[1]
    for name in ("a1", "a2", "b1", "b2"):
        eps[name].address(f"{placed[name]['ipv4']}/{prefix}")
    for name in ("a1", "a2", "b1", "b2"):
        eps[name].start(ECHO_SERVER, 7777)
    # across the tunnel, both ways, and to the gateway's side (the echo needs ARP first:
    # an L2 path); B likewise over its own tunnel
    assert eps["a2"].echo(placed["a1"]["ipv4"]) and eps["a1"].echo(placed["a2"]["ipv4"])
    assert eps["b2"].echo(placed["b1"]["ipv4"])
    # B's nodes, even holding addresses of A's network, reach neither of A's nodes
    last = ipaddress.IPv4Address(nets["a"]["dhcp_end"])
    eps["b2"].address(f"{last}/{prefix}")
    eps["b1"].address(f"{last - 1}/{prefix}")
    pairs = [(attacker, victim) for attacker in ("b1", "b2") for victim in ("a1", "a2")]
    with concurrent.futures.ThreadPoolExecutor(len(pairs)) as pool:
        answers = list(pool.map(
            lambda pair: eps[pair[0]].echo(placed[pair[1]]["ipv4"], attempts=2), pairs))
    assert answers == [False] * len(pairs), dict(zip(pairs, answers))
    # and A still reaches across afterwards
    assert eps["a1"].echo(placed["a2"]["ipv4"])


def test_a_node_cannot_send_into_another_networks_tunnel(site):
    """The attack: B's node sends VXLAN packets carrying A's id to a hypervisor address it
    reaches (B's gateway, on hv1: the VXLAN socket listens on every address). The hook's
    firewall rule drops VXLAN from every project bridge; without it, the frame lands on
    A's bridge (shown first, so the refusal is the rule's doing)."""
    eps, nets = site["eps"], site["nets"]
    hv1 = site["hv1"]
    prefix = nets["b"]["cidr"].split("/")[1]
    ips = ip("-n", eps["b1"].name, "addr", "show", "dev", "eth0")
    if site["ports"]["b1"]["ipv4"] not in ips:
        eps["b1"].address(f"{site['ports']['b1']['ipv4']}/{prefix}")
    rule = vxlan_hook.firewall_rules()[0]
    assert hv1.run(["iptables", "-C", *rule]).returncode == 0

    def attempt(marker):
        listener = eps["a1"].start(LISTEN, marker, 4)
        eps["b1"].python(VXLAN_SEND, nets["b"]["gateway"], nets["a"]["vni"], marker)
        return listener.stdout.readline().strip()

    hv1.run(["iptables", "-D", *rule], check=True)
    try:
        assert attempt("open-" + uuid.uuid4().hex) == "seen"
    finally:
        hv1.run(["iptables", "-I", *rule], check=True)
    assert attempt("closed-" + uuid.uuid4().hex) == "not-seen"


def test_stopping_the_network_removes_the_tunnel(site):
    """Last: the hook removes the device with the network, and makes it again on start."""
    net = site["nets"]["b"]
    dev = f"vxlan{net['vni']}"
    libvirt_net = site["conns"]["hv2"].networkLookupByName(netxml.network_name(net["uuid"]))
    libvirt_net.destroy()
    assert site["hv2"].run(["ip", "link", "show", "dev", dev]).returncode != 0
    reconcile_networks(site["store"], site["conns"]["hv2"], site["hvs"]["hv2"])
    assert site["hv2"].run(["ip", "link", "show", "dev", dev]).returncode == 0


# -- running nodes plugged back into a network defined again

DOMAIN = """<domain type='qemu'><name>{name}</name><memory unit='MiB'>64</memory>
<vcpu>1</vcpu><os><type arch='x86_64'>hvm</type><boot dev='hd'/></os><devices>
<disk type='file' device='disk'><driver name='qemu' type='qcow2'/>
<source file='{disk}'/><target dev='vda' bus='virtio'/></disk>
<interface type='network'><mac address='{mac}'/><source network='{network}'/>
<model type='virtio'/><rom bar='off'/></interface></devices></domain>"""


def tap_of(ns, mac):
    """The tap libvirt made for a guest's NIC (its MAC with the first byte fe), as
    vxlan_hook.links reads `ip -j -d link show`."""
    found = [d for d in vxlan_hook.links(ns.run(["ip", "-j", "-d", "link", "show"],
                                                check=True).stdout)
             if d["mac"] == vxlan_hook.tap_mac(mac) and d["kind"] == "tap"]
    assert len(found) == 1, found
    return found[0]


def bridge_mtu(ns, bridge):
    return [d for d in vxlan_hook.links(ns.run(["ip", "-j", "-d", "link", "show", "dev",
                                                bridge], check=True).stdout)][0]["mtu"]


def assert_port_reclaimed(conn, network, mac):
    """libvirt's record of the domain's port is back on the network, under the id the
    domain holds (its stop releases it), after the network lost it by being destroyed."""
    name = netxml.network_name(network["uuid"])
    dom = conn.lookupByName("node-a")
    held = netxml.domain_ports(dom.XMLDesc(0), name)
    assert [n["mac"] for n in held] == [mac]
    ports_now = [ET.fromstring(p.XMLDesc()) for p in
                 conn.networkLookupByName(name).listAllPorts()]
    assert [(p.findtext("uuid"), p.find("mac").get("address"), p.findtext("owner/name"))
            for p in ports_now] == [(held[0]["portid"], mac, "node-a")]


@pytest.fixture(scope="module")
def one_hv(tmp_path_factory):
    """One hypervisor (a Netns, its libvirtd with the hook, no underlay address) and a
    store placing two nodes of two projects on it, each a running domain (no OS: an empty
    64 MiB disk; its NIC's tap is what is tested)."""
    netns.require()
    for tool in ("qemu-img", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: `make setup` as root installs it")
    # libvirt's first QEMU probe in a fresh libvirtd (the first domain) takes ~50 s on a
    # busy machine: past the suite's 45 s stack dump, which is for hung requests
    faulthandler.cancel_dump_traceback_later()
    tmp = tmp_path_factory.mktemp("replug")
    disks = {name: str(tmp / f"empty-{name}.qcow2") for name in ("a", "b")}
    for disk in disks.values():
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", disk, "64M"],
                       check=True)
    with netns.Netns(prefix="rpl") as ns:
        store = Store(str(tmp / "state"))
        settings = config.load(environ={}, overrides={"state_dir": store.directory,
                                                      "network_routing": "isolated"})
        hv = store.collection("compute_hypervisors").insert({
            "name": "hv1", "driver_spec": {"kind": "libvirt", "connection_uri": ns.uri}})
        placed = {}
        for name in ("a", "b"):
            node = store.collection("compute_nodes").insert({
                "project_id": str(uuid.uuid4()), "network": None, "hypervisor": hv["uuid"]})
            placed[name] = ports.allocate(store, settings, node)
        nets = {name: networks.networks(store).get(placed[name]["network"])
                for name in placed}
        conn = ns.connect()
        try:
            reconcile_networks(store, conn, hv)
            # a's network as an appliance from before VXLAN ids defined it: no id, no
            # MTU, no list of nodes (the next pass defines it again)
            net = conn.networkLookupByName(netxml.network_name(nets["a"]["uuid"]))
            net.destroy()
            net.undefine()
            old = {k: v for k, v in nets["a"].items() if k != "vni"}
            conn.networkDefineXML(netxml.network_xml(
                old, netxml.host_entries([placed["a"]]))).create()
            nets = {n: networks.networks(store).get(nets[n]["uuid"]) for n in nets}
            for name in ("a", "b"):
                conn.createXML(DOMAIN.format(
                    name=f"node-{name}", disk=disks[name], mac=placed[name]["mac"],
                    network=netxml.network_name(nets[name]["uuid"])))
            yield {"ns": ns, "conn": conn, "store": store, "hv": hv, "ports": placed,
                   "nets": nets}
        finally:
            for dom in conn.listAllDomains():
                with contextlib.suppress(Exception):
                    dom.destroy()
            conn.close()
            store.close()


def test_a_network_defined_again_gets_its_running_nodes_back(one_hv):
    """The pass that defines a's network again (its shape changed: it gains its VXLAN id
    and MTU 1450, as a network does when a hypervisor joins the underlay) removes the
    bridge under node a's running domain; the hook puts its tap on the new bridge, with
    the network's MTU."""
    ns, conn, nets, placed = one_hv["ns"], one_hv["conn"], one_hv["nets"], one_hv["ports"]
    bridge = nets["a"]["bridge"]
    before = tap_of(ns, placed["a"]["mac"])
    assert before["master"] == bridge and before["mtu"] == "1500"
    reconcile_networks(one_hv["store"], conn, one_hv["hv"])
    xml = conn.networkLookupByName(netxml.network_name(nets["a"]["uuid"])).XMLDesc(0)
    assert netxml.shape(xml)["mtu"] == "1450" and netxml.plugs(xml) == [placed["a"]["mac"]]
    after = tap_of(ns, placed["a"]["mac"])
    assert after["name"] == before["name"]          # the same tap: the domain ran on
    assert after["master"] == bridge and after["mtu"] == "1450"
    assert bridge_mtu(ns, bridge) == "1450"
    assert_port_reclaimed(conn, nets["a"], placed["a"]["mac"])
    # b's node, on its own network all along, did not move
    assert tap_of(ns, placed["b"]["mac"])["master"] == nets["b"]["bridge"]


def test_only_loose_taps_are_plugged_never_another_networks(one_hv):
    """The hostile case: a's network defined by hand listing b's node too (another
    project's, on b's bridge). The hook plugs a's loose tap and leaves b's where it is."""
    ns, conn, nets, placed = one_hv["ns"], one_hv["conn"], one_hv["nets"], one_hv["ports"]
    net = conn.networkLookupByName(netxml.network_name(nets["a"]["uuid"]))
    net.destroy()
    assert tap_of(ns, placed["a"]["mac"])["master"] is None     # what libvirt leaves
    net.undefine()
    conn.networkDefineXML(netxml.network_xml(
        nets["a"], netxml.host_entries([placed["a"]]),
        plugs=[placed["a"]["mac"], placed["b"]["mac"]])).create()
    assert tap_of(ns, placed["a"]["mac"])["master"] == nets["a"]["bridge"]
    assert tap_of(ns, placed["b"]["mac"])["master"] == nets["b"]["bridge"]


def test_a_stopped_network_is_started_with_todays_nodes_and_plugs_them(one_hv):
    """A network stopped under its running nodes (by hand, here) is defined anew while
    stopped, so its list is the store's (the hand-made one above named b's node too), and
    the pass that starts it again plugs a's tap back."""
    ns, conn, nets, placed = one_hv["ns"], one_hv["conn"], one_hv["nets"], one_hv["ports"]
    name = netxml.network_name(nets["a"]["uuid"])
    conn.networkLookupByName(name).destroy()
    assert tap_of(ns, placed["a"]["mac"])["master"] is None
    reconcile_networks(one_hv["store"], conn, one_hv["hv"])
    assert netxml.plugs(conn.networkLookupByName(name).XMLDesc(0)) == [placed["a"]["mac"]]
    assert tap_of(ns, placed["a"]["mac"])["master"] == nets["a"]["bridge"]
    assert_port_reclaimed(conn, nets["a"], placed["a"]["mac"])
    assert tap_of(ns, placed["b"]["mac"])["master"] == nets["b"]["bridge"]


def test_a_bad_mac_listed_stops_the_networks_start(one_hv):
    """The hook refuses a MAC it cannot use, and libvirt refuses the start with its
    message: nothing is run."""
    import libvirt
    conn = one_hv["conn"]
    record = {**one_hv["nets"]["a"], "uuid": str(uuid.uuid4()), "vni": None}
    record["bridge"] = networks.bridge_name(record["uuid"])
    # a bare bridge (no addresses: they would be a's)
    xml = netxml.network_xml(record, [], home=False, plugs=["52:54:00:00:00:01"]).replace(
        "52:54:00:00:00:01", "52:54:00:00:00:01 master eth0")
    net = conn.networkDefineXML(xml)
    try:
        with pytest.raises(libvirt.libvirtError, match="not a MAC address"):
            net.create()
        assert not net.isActive()
    finally:
        net.undefine()
