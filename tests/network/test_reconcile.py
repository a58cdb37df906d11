"""The libvirt network step against libvirt's test driver (test:///default): define and
start, host entries changed live, stale networks of ours removed and no other, status
written, and a second pass that changes nothing."""

import uuid

import libvirt
import pytest

from appliance.network import netxml, networks, ports
from appliance.network.reconcile import reconcile_networks

ADMIN = networks.ADMIN_PROJECT
HV, OTHER_HV = str(uuid.uuid4()), str(uuid.uuid4())


class Recorder:
    """The connection and its networks as they are, with every changing call recorded."""

    CHANGES = {"networkDefineXML", "create", "destroy", "undefine", "update", "setAutostart"}

    def __init__(self, target, calls):
        self._target, self.calls = target, calls

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args):
            if name in self.CHANGES:
                self.calls.append((name, *args))
            result = attr(*args)
            if isinstance(result, libvirt.virNetwork):
                return Recorder(result, self.calls)
            if isinstance(result, list):
                return [Recorder(r, self.calls) if isinstance(r, libvirt.virNetwork) else r
                        for r in result]
            return result
        return call


@pytest.fixture
def conn():
    # the test driver's state lives as long as the process: start and end without ours
    raw = libvirt.open("test:///default")
    _drop_ours(raw)
    yield raw
    _drop_ours(raw)
    raw.close()


def _drop_ours(raw):
    for net in raw.listAllNetworks():
        if net.name().startswith(netxml.PREFIX):
            if net.isActive():
                net.destroy()
            net.undefine()


def place(store, settings, hypervisor=HV, project=ADMIN, network=None):
    """A node placed on a hypervisor, with its port."""
    node = store.collection("compute_nodes").insert({
        "project_id": project, "network": network, "hypervisor": hypervisor})
    return node, ports.allocate(store, settings, node)


def libvirt_net(conn, network_uuid):
    return conn.networkLookupByName(netxml.network_name(network_uuid))


def live_hosts(conn, network_uuid):
    return sorted((h["mac"], h["ip"]) for h in netxml.hosts(
        libvirt_net(conn, network_uuid).XMLDesc(0)))


def revisions(store):
    return {r["uuid"]: r["revision"] for kind in (networks.networks, networks.ports)
            for r in kind(store).records()}


def test_defines_starts_and_marks_active(conn, store, settings):
    made = [place(store, settings) for _ in range(2)]
    net_uuid = made[0][1]["network"]
    reconcile_networks(store, conn, {"uuid": HV})
    net = libvirt_net(conn, net_uuid)
    assert net.isActive() and net.isPersistent() and net.autostart()
    assert live_hosts(conn, net_uuid) == sorted((p["mac"], p["ipv4"]) for _, p in made)
    shape = netxml.shape(net.XMLDesc(0))
    record = networks.networks(store).get(net_uuid)
    assert shape["bridge"] == record["bridge"] and shape["forward"] is None
    assert shape["ips"][0] == ("10.20.0.1", "255.255.252.0", ("10.20.0.20", "10.20.3.254"))
    assert (record["status"], record["status_reason"]) == ("ACTIVE", None)
    assert {p["status"] for p in networks.ports(store).records()} == {"ACTIVE"}


def test_second_pass_changes_nothing(conn, store, settings):
    place(store, settings)
    reconcile_networks(store, conn, HV)
    before, xml = revisions(store), [n.XMLDesc(0) for n in conn.listAllNetworks()]
    calls = []
    reconcile_networks(store, Recorder(conn, calls), HV)
    assert calls == []
    assert revisions(store) == before
    assert [n.XMLDesc(0) for n in conn.listAllNetworks()] == xml


def test_host_entries_follow_ports_live(conn, store, settings):
    (first, p1), (second, p2) = place(store, settings), place(store, settings)
    net_uuid = p1["network"]
    reconcile_networks(store, conn, HV)
    calls = []
    recorder = Recorder(conn, calls)
    _, p3 = place(store, settings)
    reconcile_networks(store, recorder, HV)
    assert live_hosts(conn, net_uuid) == sorted((p["mac"], p["ipv4"]) for p in (p1, p2, p3))
    assert [c[0] for c in calls] == ["update"]
    assert calls[0][1] == libvirt.VIR_NETWORK_UPDATE_COMMAND_ADD_LAST
    calls.clear()
    ports.release(store, second["uuid"])
    store.collection("compute_nodes").delete(second["uuid"])
    reconcile_networks(store, recorder, HV)
    assert live_hosts(conn, net_uuid) == sorted((p["mac"], p["ipv4"]) for p in (p1, p3))
    assert [(c[0], c[1]) for c in calls] == [
        ("update", libvirt.VIR_NETWORK_UPDATE_COMMAND_DELETE)]
    # live and in the definition, and never by restarting the network
    flags = calls[0][-1]
    assert flags == (libvirt.VIR_NETWORK_UPDATE_AFFECT_LIVE
                     | libvirt.VIR_NETWORK_UPDATE_AFFECT_CONFIG)
    assert libvirt_net(conn, net_uuid).isActive()
    # the freed address, once its hold is over (ports.HOLD_SECONDS: dnsmasq's lease of the
    # departed MAC), goes to the next node, with another MAC, in one pass
    hold = networks.holds(store).find_one(ipv4=p2["ipv4"])
    networks.holds(store).update(hold["uuid"], {
        "released_at": hold["released_at"] - ports.HOLD_SECONDS})
    _, p4 = place(store, settings)
    assert p4["ipv4"] == p2["ipv4"] and p4["mac"] != p2["mac"]
    reconcile_networks(store, conn, HV)
    assert live_hosts(conn, net_uuid) == sorted((p["mac"], p["ipv4"]) for p in (p1, p3, p4))


def test_only_nodes_placed_on_this_hypervisor(conn, store, settings):
    _, here = place(store, settings)
    _, there = place(store, settings, hypervisor=OTHER_HV)
    project = str(uuid.uuid4())
    _, elsewhere = place(store, settings, hypervisor=OTHER_HV, project=project)
    _, unplaced = place(store, settings, hypervisor=None, project=project)
    reconcile_networks(store, conn, HV)
    assert live_hosts(conn, here["network"]) == [(here["mac"], here["ipv4"])]
    with pytest.raises(libvirt.libvirtError):
        libvirt_net(conn, elsewhere["network"])
    assert networks.networks(store).get(elsewhere["network"])["status"] == "NEW"
    assert networks.ports(store).get(there["uuid"])["status"] == "NEW"


def test_a_node_gone_elsewhere_leaves_no_host_entry_here(conn, store, settings):
    node, port = place(store, settings)
    _, stays = place(store, settings)
    reconcile_networks(store, conn, HV)
    store.collection("compute_nodes").update(node["uuid"], {"hypervisor": OTHER_HV})
    reconcile_networks(store, conn, HV)
    assert live_hosts(conn, port["network"]) == [(stays["mac"], stays["ipv4"])]
    # with no node left here the network stays as it is, emptied, and is not started again
    store.collection("compute_nodes").update(stays["node"], {"hypervisor": OTHER_HV})
    reconcile_networks(store, conn, HV)
    libvirt_net(conn, port["network"]).destroy()
    calls = []
    reconcile_networks(store, Recorder(conn, calls), HV)
    assert live_hosts(conn, port["network"]) == []
    assert calls == [] and not libvirt_net(conn, port["network"]).isActive()


def test_nat_network_forwards(conn, store, settings):
    project = str(uuid.uuid4())
    net = networks.create(store, settings, {"project_id": project, "name": "out",
                                            "routing": "nat"})
    place(store, settings, project=project, network=net["uuid"])
    reconcile_networks(store, conn, HV)
    assert netxml.shape(libvirt_net(conn, net["uuid"]).XMLDesc(0))["forward"] == "nat"


def test_stale_networks_of_ours_go_and_no_other(conn, store, settings):
    _, port = place(store, settings)
    reconcile_networks(store, conn, HV)
    stale = str(uuid.uuid4())
    conn.networkDefineXML(netxml.network_xml({
        "uuid": stale, "routing": "isolated", "cidr": "10.77.0.0/24",
        "bridge": networks.bridge_name(stale), "gateway": "10.77.0.1", "dns": "10.77.0.2",
        "dhcp_start": "10.77.0.20", "dhcp_end": "10.77.0.254"}, [])).create()
    foreign = conn.networkDefineXML(
        "<network><name>appliance</name><bridge name='virbr9'/>"
        "<ip address='10.78.0.1' netmask='255.255.255.0'/></network>")
    try:
        names = {n.name() for n in conn.listAllNetworks()} - {netxml.network_name(stale)}
        reconcile_networks(store, conn, HV)
        assert {n.name() for n in conn.listAllNetworks()} == names
        assert "default" in names and "appliance" in names
        # the record's network goes once its record does (its ports released first)
        node = networks.ports(store).get(port["uuid"])["node"]
        ports.release(store, node)
        store.collection("compute_nodes").delete(node)
        networks.networks(store).delete(port["network"])
        reconcile_networks(store, conn, HV)
        assert {n.name() for n in conn.listAllNetworks()} == names - {
            netxml.network_name(port["network"])}
    finally:
        foreign.undefine()


def test_a_network_changed_behind_our_back_is_defined_again(conn, store, settings):
    _, port = place(store, settings)
    reconcile_networks(store, conn, HV)
    net = libvirt_net(conn, port["network"])
    net.destroy()
    net.undefine()
    conn.networkDefineXML(
        f"<network><name>{netxml.network_name(port['network'])}</name>"
        "<bridge name='virbr7'/><ip address='10.20.0.1' netmask='255.255.252.0'/></network>")
    reconcile_networks(store, conn, HV)
    net = libvirt_net(conn, port["network"])
    record = networks.networks(store).get(port["network"])
    assert net.isActive() and netxml.shape(net.XMLDesc(0))["bridge"] == record["bridge"]
    assert live_hosts(conn, port["network"]) == [(port["mac"], port["ipv4"])]


class Refusing(Recorder):
    def networkDefineXML(self, xml):
        raise libvirt.libvirtError("operation failed: bridge name already in use")


def test_libvirt_refusal_is_error_with_its_reason_then_repaired(conn, store, settings):
    _, port = place(store, settings)
    reconcile_networks(store, Refusing(conn, []), HV)
    record = networks.networks(store).get(port["network"])
    assert record["status"] == "ERROR"
    assert "bridge name already in use" in record["status_reason"]
    assert networks.ports(store).get(port["uuid"])["status"] == "NEW"
    reconcile_networks(store, conn, HV)
    record = networks.networks(store).get(port["network"])
    assert (record["status"], record["status_reason"]) == ("ACTIVE", None)
