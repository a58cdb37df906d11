"""The libvirt network hook, pure parts: what it reads from the XML libvirt hands it (the
XML netxml writes, wrapped as libvirt wraps it), the commands it would run, and its
refusals. The commands really run in tests/network/test_vxlan_netns.py."""

import io

import pytest

from appliance.network import netxml, vxlan_hook
from appliance.network.networks import bridge_name

UUID = "5b0c1a52-9d2f-4b43-8c3e-2f2b1d4e6a70"
RECORD = {"uuid": UUID, "routing": "isolated", "cidr": "10.40.0.0/24",
          "bridge": bridge_name(UUID), "gateway": "10.40.0.1", "dns": "10.40.0.2",
          "dhcp_start": "10.40.0.20", "dhcp_end": "10.40.0.254", "vni": 4100}
PEERS = ["192.0.2.10", "192.0.2.9"]


def hook_data(xml):
    return f"<hookData>{xml}</hookData>"


@pytest.mark.parametrize("home", [True, False])
def test_reads_what_netxml_writes(home):
    xml = netxml.network_xml(RECORD, [], peers=PEERS, home=home)
    assert vxlan_hook.parse(hook_data(xml)) == {
        "name": f"appliance-{UUID}", "vni": 4100, "bridge": "ap-5b0c1a529d2f",
        "mtu": "1450", "peers": ["192.0.2.9", "192.0.2.10"]}


def test_networks_without_a_vxlan_or_not_ours_are_left_alone():
    old = {k: v for k, v in RECORD.items() if k != "vni"}
    assert vxlan_hook.parse(hook_data(netxml.network_xml(old, []))) is None
    foreign = netxml.network_xml(RECORD, [], peers=PEERS).replace(
        f"appliance-{UUID}", "default")
    assert vxlan_hook.parse(hook_data(foreign)) is None


def test_start_commands():
    vxlan = vxlan_hook.parse(hook_data(netxml.network_xml(RECORD, [], peers=PEERS)))
    assert vxlan_hook.start_commands(vxlan) == [
        ["ip", "link", "add", "vxlan4100", "type", "vxlan", "id", "4100",
         "dstport", "4789"],
        ["ip", "link", "set", "vxlan4100", "mtu", "1450"],
        ["ip", "link", "set", "vxlan4100", "master", "ap-5b0c1a529d2f"],
        ["ip", "link", "set", "vxlan4100", "up"],
        ["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vxlan4100",
         "dst", "192.0.2.9"],
        ["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vxlan4100",
         "dst", "192.0.2.10"]]
    assert vxlan_hook.stop_commands(vxlan) == [["ip", "link", "del", "vxlan4100"]]


def test_peers_follow_the_xml_on_update():
    shown = ("00:00:00:00:00:00 dst 192.0.2.9 self permanent\n"
             "00:00:00:00:00:00 dst 192.0.2.7 self permanent\n"
             "52:54:00:12:34:56 dst 192.0.2.9 self \n"
             "ae:1f:22:00:00:01 master ap-5b0c1a529d2f permanent\n")
    current = vxlan_hook.flood_peers(shown)
    assert current == ["192.0.2.9", "192.0.2.7"]
    assert vxlan_hook.fdb_commands("vxlan4100", current, ["192.0.2.9", "192.0.2.10"]) == [
        ["bridge", "fdb", "del", "00:00:00:00:00:00", "dev", "vxlan4100", "dst", "192.0.2.7"],
        ["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vxlan4100",
         "dst", "192.0.2.10"]]


def test_firewall_drops_vxlan_from_every_project_bridge():
    assert vxlan_hook.firewall_rules() == [
        ["INPUT", "-i", "ap-+", "-p", "udp", "--dport", "4789", "-j", "DROP"],
        ["FORWARD", "-i", "ap-+", "!", "-o", "ap-+", "-p", "udp", "--dport", "4789",
         "-j", "DROP"]]


@pytest.mark.parametrize("change, message", [
    (lambda x: x.replace('vni="4100"', 'vni="16777216"'), "out of VXLAN's range"),
    (lambda x: x.replace('vni="4100"', 'vni="x"'), "not a number"),
    (lambda x: x.replace("vxlan-peer-192.0.2.9", "vxlan-peer-192.0.2.9 dev lo"),
     "not an IPv4 address"),
    (lambda x: x.replace("vxlan-peer-192.0.2.9", "vxlan-peer-224.0.0.1"),
     "not a host's unicast address"),
    (lambda x: x.replace("vxlan-peer-192.0.2.9", "vxlan-peer-$(reboot)"),
     "not an IPv4 address"),
    (lambda x: x.replace("ap-5b0c1a529d2f", "eth0"), "not a project bridge"),
    (lambda x: x.replace('size="1450"', 'size="9; x"'), "mtu"),
])
def test_bad_values_stop_the_start_with_a_message(change, message, capsys):
    xml = hook_data(change(netxml.network_xml(RECORD, [], peers=PEERS)))
    with pytest.raises(vxlan_hook.HookError, match=message):
        vxlan_hook.parse(xml)
    # as libvirt runs it: status 1 (libvirt refuses the start) and the reason on stderr
    assert vxlan_hook.main(["network", f"appliance-{UUID}", "started", "begin", "-"],
                           io.StringIO(xml)) == 1
    assert message.split()[0] in capsys.readouterr().err


def test_other_operations_read_nothing_and_do_nothing():
    class Unread(io.StringIO):
        def read(self, *a):
            raise AssertionError("read")
    for operation in ("start", "port-created", "port-deleted"):
        assert vxlan_hook.main(["network", "x", operation, "begin", "-"], Unread()) == 0


def test_runs_as_the_image_runs_it():
    """The appliance image's hook (image-build/files/appliance/etc/libvirt/hooks/
    network.d/appliance-vxlan) runs the module from the venv: a network that is not ours
    goes through untouched (status 0), a bad value of ours stops the start (status 1)."""
    import subprocess
    import sys
    wrapper = "image-build/files/appliance/etc/libvirt/hooks/network.d/appliance-vxlan"
    with open(wrapper) as f:
        assert "-m appliance.network.vxlan_hook" in f.read()
    argv = [sys.executable, "-m", "appliance.network.vxlan_hook", "default", "started",
            "begin", "-"]
    plain = hook_data(netxml.network_xml({k: v for k, v in RECORD.items() if k != "vni"},
                                         []))
    assert subprocess.run(argv, input=plain, text=True).returncode == 0
    bad = hook_data(netxml.network_xml(RECORD, [], peers=["999.1.1.1"]))
    done = subprocess.run(argv, input=bad, text=True, capture_output=True)
    assert done.returncode == 1 and "peer address '999.1.1.1'" in done.stderr


def test_a_device_on_another_bridge_is_another_networks():
    """`ip -o link show dev vxlan4100` as iproute2 prints it: the bridge it is a port of."""
    vxlan = vxlan_hook.parse(hook_data(netxml.network_xml(RECORD, [], peers=PEERS)))
    on = ("7: vxlan4100: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450 qdisc noqueue master "
          "{} state UNKNOWN mode DEFAULT group default qlen 1000\\    link/ether "
          "6a:2c:11:00:00:01 brd ff:ff:ff:ff:ff:ff")
    assert vxlan_hook.master_of(on.format("ap-5b0c1a529d2f")) == "ap-5b0c1a529d2f"
    assert vxlan_hook._ours(vxlan, on.format("ap-5b0c1a529d2f"))
    assert not vxlan_hook._ours(vxlan, on.format("ap-000000000000"))
    loose = on.replace("master {} ", "")
    assert vxlan_hook.master_of(loose) is None and vxlan_hook._ours(vxlan, loose)


# -- plugging the nodes' taps back into a network defined again

GUEST = "52:54:00:11:22:33"
OTHER = "52:54:00:aa:bb:cc"
# `ip -j -d link show` as iproute2 6.1 prints it (trimmed): a tap on a bridge, the same
# tap once its bridge is gone, a bridge that took a tap's MAC, a veth
TAP_ON = ('{"ifindex":2,"ifname":"vnet7","mtu":1500,"master":"ap-000000000001",'
          '"address":"fe:54:00:11:22:33","linkinfo":{"info_kind":"tun","info_data":'
          '{"type":"tap","pi":false,"vnet_hdr":false},"info_slave_kind":"bridge"}}')
TAP_LOOSE = ('{"ifindex":2,"ifname":"vnet7","mtu":1500,"address":"fe:54:00:11:22:33",'
             '"linkinfo":{"info_kind":"tun","info_data":{"type":"tap"}}}')
BRIDGE_LINK = ('{"ifindex":3,"ifname":"ap-000000000001","mtu":1500,'
               '"address":"fe:54:00:11:22:33","linkinfo":{"info_kind":"bridge"}}')
VETH = ('{"ifindex":4,"ifname":"ve0","mtu":1500,"address":"FE:54:00:AA:BB:CC",'
        '"linkinfo":{"info_kind":"veth"}}')


def test_reads_the_plugs_netxml_writes_on_any_network_of_ours():
    xml = netxml.network_xml(RECORD, [], peers=PEERS, plugs=[OTHER.upper(), GUEST])
    assert vxlan_hook.parse_plugs(hook_data(xml)) == {
        "name": f"appliance-{UUID}", "bridge": "ap-5b0c1a529d2f", "mtu": "1450",
        "macs": [GUEST, OTHER]}
    # a network made before VXLAN ids: no tunnel, its nodes still plugged back
    old = netxml.network_xml({k: v for k, v in RECORD.items() if k != "vni"}, [],
                             plugs=[GUEST])
    assert vxlan_hook.parse(hook_data(old)) is None
    assert vxlan_hook.parse_plugs(hook_data(old)) == {
        "name": f"appliance-{UUID}", "bridge": "ap-5b0c1a529d2f", "mtu": None,
        "macs": [GUEST]}
    # none listed, or not ours: nothing to do
    assert vxlan_hook.parse_plugs(hook_data(netxml.network_xml(RECORD, []))) is None
    assert vxlan_hook.parse_plugs(hook_data(xml.replace(f"appliance-{UUID}",
                                                        "default"))) is None


def test_links_reads_ip_json():
    assert vxlan_hook.links(f"[{TAP_ON},{BRIDGE_LINK},{VETH}]") == [
        {"name": "vnet7", "mac": "fe:54:00:11:22:33", "master": "ap-000000000001",
         "kind": "tap", "mtu": "1500"},
        {"name": "ap-000000000001", "mac": "fe:54:00:11:22:33", "master": None,
         "kind": "bridge", "mtu": "1500"},
        {"name": "ve0", "mac": "fe:54:00:aa:bb:cc", "master": None, "kind": "veth",
         "mtu": "1500"}]
    assert vxlan_hook.tap_mac("52:54:00:AA:BB:CC") == "fe:54:00:aa:bb:cc"


def test_a_loose_tap_of_a_listed_node_is_plugged_with_the_networks_mtu_first():
    plugs = vxlan_hook.parse_plugs(hook_data(netxml.network_xml(RECORD, [],
                                                                plugs=[GUEST, OTHER])))
    assert vxlan_hook.plug_commands(plugs, vxlan_hook.links(f"[{TAP_LOOSE}]")) == [
        ["ip", "link", "set", "dev", "vnet7", "mtu", "1450"],
        ["ip", "link", "set", "dev", "vnet7", "master", "ap-5b0c1a529d2f"]]
    # its MTU already the network's, or a network without one: only the bridge
    at_1450 = vxlan_hook.links(f"[{TAP_LOOSE}]")
    at_1450[0]["mtu"] = "1450"
    assert vxlan_hook.plug_commands(plugs, at_1450) == [
        ["ip", "link", "set", "dev", "vnet7", "master", "ap-5b0c1a529d2f"]]
    assert vxlan_hook.plug_commands({**plugs, "mtu": None},
                                    vxlan_hook.links(f"[{TAP_LOOSE}]")) == [
        ["ip", "link", "set", "dev", "vnet7", "master", "ap-5b0c1a529d2f"]]


def test_only_a_loose_tap_is_moved():
    """A tap on a bridge (this one, or another network's: another guest's, whatever the
    metadata says), a bridge and a veth holding a listed MAC stay where they are; a tap
    of an unlisted MAC too."""
    plugs = vxlan_hook.parse_plugs(hook_data(netxml.network_xml(RECORD, [],
                                                                plugs=[GUEST, OTHER])))
    devices = vxlan_hook.links(f"[{TAP_ON},{BRIDGE_LINK},{VETH}]")
    assert vxlan_hook.plug_commands(plugs, devices) == []
    assert vxlan_hook.plug_commands({**plugs, "macs": [OTHER]},
                                    vxlan_hook.links(f"[{TAP_LOOSE}]")) == []


@pytest.mark.parametrize("mac", ["52:54:00:11:22", "52:54:00:11:22:33 dev lo",
                                 "$(reboot)", ""])
def test_a_bad_plug_mac_stops_the_start_with_a_message(mac, capsys):
    xml = hook_data(netxml.network_xml(RECORD, [], peers=PEERS, plugs=[GUEST]).replace(
        GUEST, mac))
    with pytest.raises(vxlan_hook.HookError, match="not a MAC address"):
        vxlan_hook.parse_plugs(xml)
    assert vxlan_hook.main(["network", f"appliance-{UUID}", "started", "begin", "-"],
                           io.StringIO(xml)) == 1
    assert "not a MAC address" in capsys.readouterr().err
