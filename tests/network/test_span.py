"""A network across hypervisors, against libvirt's test driver: each hypervisor its own
test connection (a `test:///<file>` URI opens a private driver per connection). The home
holds the addresses and every port's DHCP entry; the others a bare bridge; the VXLAN id
and peers ride in the XML for the hook (run for real in test_vxlan_netns.py). Also the
pure plan of a hypervisor's part."""

import uuid

import libvirt
import pytest

from appliance.network import netxml, networks, ports
from appliance.network.reconcile import plan, reconcile_networks

from .test_reconcile import Recorder, revisions

ADDRESSES = {"a": "192.0.2.1", "b": "192.0.2.2", "c": "192.0.2.3"}


@pytest.fixture
def hvs(store, tmp_path):
    """Three hypervisors, a, b (underlay) and c (underlay), each with its own driver; and
    d without an underlay address."""
    (tmp_path / "node.xml").write_text("<node/>")
    made, conns = {}, {}
    for name in ("a", "b", "c", "d"):
        spec = {"kind": "libvirt", "connection_uri": f"test:///{tmp_path}/node.xml"}
        if name in ADDRESSES:
            spec["underlay_address"] = ADDRESSES[name]
        made[name] = store.collection("compute_hypervisors").insert(
            {"name": name, "driver_spec": spec})
        conns[name] = libvirt.open(f"test:///{tmp_path}/node.xml")
    yield made, conns
    for conn in conns.values():
        conn.close()


def place(store, settings, hv, project=networks.ADMIN_PROJECT, network=None):
    node = store.collection("compute_nodes").insert({
        "project_id": project, "network": network, "hypervisor": hv["uuid"]})
    return ports.allocate(store, settings, node)


def xml_of(conn, network_uuid):
    return conn.networkLookupByName(netxml.network_name(network_uuid)).XMLDesc(0)


def pass_all(store, hvs):
    made, conns = hvs
    for name in ("a", "b", "c", "d"):
        reconcile_networks(store, conns[name], made[name])


def test_home_holds_dhcp_for_all_members_a_bare_bridge(store, settings, hvs):
    made, conns = hvs
    first, second = place(store, settings, made["a"]), place(store, settings, made["b"])
    pass_all(store, hvs)
    record = networks.networks(store).get(first["network"])
    assert record["home_hypervisor"] == made["a"]["uuid"]
    assert record["vni"] >= networks.FIRST_VNI
    home, member = xml_of(conns["a"], record["uuid"]), xml_of(conns["b"], record["uuid"])
    # one bridge name, one VXLAN id, each pointing at the other
    assert netxml.shape(home)["bridge"] == netxml.shape(member)["bridge"] == record["bridge"]
    assert netxml.vxlan(home) == netxml.vxlan(member) == str(record["vni"])
    assert (netxml.peers(home), netxml.peers(member)) == (["192.0.2.2"], ["192.0.2.1"])
    # DHCP at home for both nodes; the member has no address, no DHCP, and runs
    assert sorted(h["mac"] for h in netxml.hosts(home)) == sorted(
        [first["mac"], second["mac"]])
    assert netxml.shape(member)["ips"] == [] and netxml.hosts(member) == []
    for conn in (conns["a"], conns["b"]):
        assert conn.networkLookupByName(netxml.network_name(record["uuid"])).isActive()
    assert record["status"] == "ACTIVE"
    assert {p["status"] for p in networks.ports(store).records()} == {"ACTIVE"}
    # nothing on c, which runs no node of it
    assert conns["c"].listAllNetworks() == []
    # and a second pass everywhere changes nothing
    before = revisions(store)
    calls = []
    for name in ("a", "b", "c", "d"):
        reconcile_networks(store, Recorder(conns[name], calls), made[name])
    assert calls == [] and revisions(store) == before


def test_peers_come_and_go_live(store, settings, hvs):
    """A node on a third hypervisor adds it as a peer on the running networks by a live
    update (which calls the hook), never by redefining or restarting them."""
    made, conns = hvs
    port = place(store, settings, made["a"])
    place(store, settings, made["b"])
    pass_all(store, hvs)
    third = place(store, settings, made["c"])
    calls = []
    reconcile_networks(store, Recorder(conns["a"], calls), made["a"])
    reconcile_networks(store, Recorder(conns["b"], calls), made["b"])
    # live updates only: the third node's DHCP entry at home, and c as a peer on both
    assert {c[0] for c in calls} == {"update"}
    assert [c[2] for c in calls].count(libvirt.VIR_NETWORK_SECTION_IP_DHCP_HOST) == 1
    peer_adds = [c for c in calls if c[2] == libvirt.VIR_NETWORK_SECTION_PORTGROUP]
    assert [(c[1], c[4]) for c in peer_adds] == [
        (libvirt.VIR_NETWORK_UPDATE_COMMAND_ADD_LAST, netxml.peer_xml("192.0.2.3"))] * 2
    assert all(c[-1] == libvirt.VIR_NETWORK_UPDATE_AFFECT_LIVE
               | libvirt.VIR_NETWORK_UPDATE_AFFECT_CONFIG for c in peer_adds)
    reconcile_networks(store, conns["c"], made["c"])
    net = port["network"]
    assert netxml.peers(xml_of(conns["a"], net)) == ["192.0.2.2", "192.0.2.3"]
    assert netxml.peers(xml_of(conns["c"], net)) == ["192.0.2.1", "192.0.2.2"]
    # the third node's DHCP entry is at home
    assert third["mac"] in {h["mac"] for h in netxml.hosts(xml_of(conns["a"], net))}
    # b's node goes: b leaves the others' peers, and b's bridge stays as it is (emptied)
    ports.release(store, networks.ports(store).by("network", net)[1]["node"])
    store.collection("compute_nodes").delete_where(
        lambda n: n["hypervisor"] == made["b"]["uuid"])
    pass_all(store, hvs)
    assert netxml.peers(xml_of(conns["a"], net)) == ["192.0.2.3"]
    assert netxml.peers(xml_of(conns["c"], net)) == ["192.0.2.1"]


def test_another_projects_network_is_another_tunnel(store, settings, hvs):
    made, conns = hvs
    mine = place(store, settings, made["a"])
    place(store, settings, made["b"])
    other_project = str(uuid.uuid4())
    theirs = place(store, settings, made["b"], project=other_project)
    pass_all(store, hvs)
    mine_net = networks.networks(store).get(mine["network"])
    their_net = networks.networks(store).get(theirs["network"])
    assert mine_net["vni"] != their_net["vni"] and mine_net["bridge"] != their_net["bridge"]
    # homed on b, where its only node runs: its own addresses and DHCP there, no peer
    assert their_net["home_hypervisor"] == made["b"]["uuid"]
    theirs_xml = xml_of(conns["b"], their_net["uuid"])
    assert netxml.peers(theirs_xml) == [] and netxml.shape(theirs_xml)["ips"]
    assert [h["mac"] for h in netxml.hosts(theirs_xml)] == [theirs["mac"]]
    with pytest.raises(libvirt.libvirtError):
        xml_of(conns["a"], their_net["uuid"])


def test_a_hypervisor_outside_the_underlay_keeps_a_network_of_its_own(store, settings, hvs):
    """d has no underlay address: its nodes of a network homed on a get d's own network,
    as before VXLAN (its own DHCP; not joined), and a's is not told about d."""
    made, conns = hvs
    port = place(store, settings, made["a"])
    away = place(store, settings, made["d"])
    pass_all(store, hvs)
    net = port["network"]
    alone = xml_of(conns["d"], net)
    assert netxml.peers(alone) == [] and netxml.shape(alone)["ips"]
    assert [h["mac"] for h in netxml.hosts(alone)] == [away["mac"]]
    assert [h["mac"] for h in netxml.hosts(xml_of(conns["a"], net))] == [port["mac"]]
    assert netxml.peers(xml_of(conns["a"], net)) == []


def test_vxlan_ids_are_the_lowest_free(store, settings):
    made = [networks.create(store, settings, {"project_id": str(uuid.uuid4()), "name": n})
            for n in "xyz"]
    assert [n["vni"] for n in made] == [networks.FIRST_VNI + i for i in range(3)]
    networks.networks(store).delete(made[1]["uuid"])
    again = networks.create(store, settings, {"project_id": str(uuid.uuid4()), "name": "w"})
    assert again["vni"] == networks.FIRST_VNI + 1


def test_a_network_made_before_vxlan_ids_gets_one(store, settings, hvs):
    made, conns = hvs
    port = place(store, settings, made["a"])
    coll = networks.networks(store)
    old = coll.get(port["network"])
    coll.update(old["uuid"], {"vni": None})
    other = networks.create(store, settings, {"project_id": str(uuid.uuid4()), "name": "x"})
    reconcile_networks(store, conns["a"], made["a"])
    vni = coll.get(old["uuid"])["vni"]
    assert vni is not None and vni != other["vni"]
    assert netxml.vxlan(xml_of(conns["a"], old["uuid"])) == str(vni)


HV = {name: {"uuid": name, "driver_spec": {"underlay_address": address}}
      for name, address in ADDRESSES.items()} | {"d": {"uuid": "d", "driver_spec": {}}}
NET = {"uuid": "n", "vni": 5000, "home_hypervisor": "a"}


@pytest.mark.parametrize("here, users, expected", [
    ("a", {"a": ["pa"], "b": ["pb"], "d": ["pd"]}, ("home", ["pa", "pb"], ["192.0.2.2"], True)),
    ("b", {"a": ["pa"], "b": ["pb"], "c": ["pc"]},
     ("member", [], ["192.0.2.1", "192.0.2.3"], True)),
    # the home with no node of its own still serves DHCP to the members'
    ("a", {"b": ["pb"]}, ("home", ["pb"], ["192.0.2.2"], True)),
    ("d", {"a": ["pa"], "d": ["pd"]}, ("alone", ["pd"], [], True)),
    # a member with no node left: kept in step, not wanted
    ("c", {"a": ["pa"]}, ("member", [], ["192.0.2.1"], False)),
])
def test_plan(here, users, expected):
    assert plan(NET, users, HV, here) == expected


def test_plan_with_a_home_outside_the_underlay():
    """A home without an underlay address joins nobody: every hypervisor is alone."""
    net = dict(NET, home_hypervisor="d")
    assert plan(net, {"d": ["pd"], "a": ["pa"]}, HV, "a") == ("alone", ["pa"], [], True)
    assert plan(net, {"d": ["pd"], "a": ["pa"]}, HV, "d") == ("home", ["pd"], [], True)


def test_a_home_that_joins_the_underlay_starts_spanning_live(store, settings, hvs):
    """A hypervisor that runs nodes before it has an underlay address: once it gets one,
    its networks get their peers by live updates, never defined again (their bridges
    stay up under the running nodes)."""
    made, conns = hvs
    port = place(store, settings, made["d"])
    reconcile_networks(store, conns["d"], made["d"])
    place(store, settings, made["a"])
    coll = store.collection("compute_hypervisors")
    d = coll.update(made["d"]["uuid"], {"driver_spec": {
        **made["d"]["driver_spec"], "underlay_address": "192.0.2.4"}})
    calls = []
    reconcile_networks(store, Recorder(conns["d"], calls), d)
    assert {c[0] for c in calls} == {"update"}
    assert netxml.peers(xml_of(conns["d"], port["network"])) == ["192.0.2.1"]
    reconcile_networks(store, conns["a"], made["a"])
    member = xml_of(conns["a"], port["network"])
    assert netxml.peers(member) == ["192.0.2.4"] and netxml.shape(member)["ips"] == []


def test_each_definition_lists_the_nodes_placed_on_its_hypervisor(store, settings, hvs):
    """For the hook to plug their taps back if the network is defined again under them:
    the home lists its own nodes only (not the members' whose DHCP entries it holds), a
    member and a hypervisor outside the underlay theirs."""
    made, conns = hvs
    home = [place(store, settings, made["a"]) for _ in range(2)]
    net = home[0]["network"]
    member = place(store, settings, made["b"], network=net)
    alone = place(store, settings, made["d"], network=net)
    pass_all(store, hvs)
    assert netxml.plugs(xml_of(conns["a"], net)) == sorted(p["mac"] for p in home)
    assert netxml.plugs(xml_of(conns["b"], net)) == [member["mac"]]
    assert netxml.plugs(xml_of(conns["d"], net)) == [alone["mac"]]
