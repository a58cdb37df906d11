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
"""

import concurrent.futures
import contextlib
import ipaddress
import subprocess
import uuid

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
