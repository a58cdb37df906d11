#!/usr/bin/python3
"""libvirt's network hook that joins a project network's bridges on several hypervisors by
a VXLAN (docs/network.md, "Networks across hypervisors").

The compute daemon reaches a hypervisor only through libvirt, so what a hypervisor must do
beyond libvirt rides in the network's own XML, which libvirt hands to this hook on stdin
(`<hookData><network>...`) with `network <name> <operation> <sub-op> -`:
- `<metadata><appliance:vxlan vni=".."/>`: the VXLAN id;
- `<portgroup name='vxlan-peer-<address>'/>`: each peer's underlay address;
- `<bridge name>` and `<mtu size>`.
On `started` it makes `vxlan<VNI>` (its source address the kernel's route to the peers;
unicast: one all-zeros FDB entry per peer, so the
kernel copies broadcast and unknown frames to each peer, head-end replication; the rest
is learnt), puts it on the bridge, and drops VXLAN packets arriving from any project
bridge (`ap-*`): a node must never send into another network's tunnel. On `updated` (a
peer added or removed live) it brings the FDB to the peers; on `stopped` it removes the
device. A `vxlan<VNI>` on another bridge is never touched (the start fails, naming it). A network without the metadata, or not named `appliance-...`, is left alone.

The same hook plugs nodes back in. When the compute daemon defines a network again
(its shape changed: a hypervisor joined the underlay, docs/network.md), libvirt's destroy
removes the bridge under the running guests and the new one starts empty: libvirt
neither re-attaches their taps nor keeps their network ports. So every definition lists
the MACs of the nodes placed on this hypervisor that use the network
(`<metadata><plug:plugs><plug:plug mac='..'/>`, on any network of ours, with a VXLAN or not),
and on `started` the hook puts each one's tap (a tun device whose MAC is the guest's with
the first byte fe, as libvirt makes it) back on the bridge, with the network's MTU, when
it is on no bridge. A device on a bridge (another network's guest) or not a tap is never
moved.

Standalone and stdlib only: the appliance image runs it from its venv
(/etc/libvirt/hooks/network.d/appliance-vxlan); an outside hypervisor gets this file
copied there (it needs python3, an iproute2 with `ip -j` and iptables). A bad value stops with a message
and status 1, which makes libvirt refuse to start the network, with that message.
"""

import ipaddress
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

VXLAN_NS = "https://appliance.local/ns/network"
PEER_PREFIX = "vxlan-peer-"
NETWORK_PREFIX = "appliance-"
PORT = 4789                     # IANA's VXLAN port
BRIDGES = "ap-+"                # iptables' wildcard for every project bridge
BRIDGE = re.compile(r"^ap-[0-9a-f]{12}$")
ZERO_MAC = "00:00:00:00:00:00"
# the nodes to plug back: <plug:plugs><plug:plug mac='..'/>...</plug:plugs>, a namespace of
# its own because libvirt keeps one element per namespace in a network's <metadata>
PLUG_NS = "https://appliance.local/ns/network/plugs"
PLUGS = f"metadata/{{{PLUG_NS}}}plugs/{{{PLUG_NS}}}plug"
MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
TAP_KIND = "tap"                # libvirt's vnetN: a tun device of type tap
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class HookError(Exception):
    pass


def _our_network(text):
    """The `<network>` of a hook's XML when it is one of ours (named `appliance-...`),
    else None."""
    root = ET.fromstring(text)
    network = root if root.tag == "network" else root.find("network")
    if network is None or not (network.findtext("name") or "").startswith(NETWORK_PREFIX):
        return None
    return network


def _bridge(network):
    bridge = network.find("bridge")
    bridge = None if bridge is None else bridge.get("name")
    if not BRIDGE.match(bridge or ""):
        raise HookError(f"bridge {bridge!r} is not a project bridge (ap-<12 hex digits>)")
    return bridge


def _mtu(network):
    mtu = network.find("mtu")
    mtu = None if mtu is None else mtu.get("size")
    if mtu is not None and not (mtu.isdigit() and 68 <= int(mtu) <= 65535):
        raise HookError(f"mtu {mtu!r} is not a number between 68 and 65535")
    return mtu


def parse(text):
    """The VXLAN of a hook's XML: {name, vni, bridge, mtu, peers}, or None when the
    network is not one of ours with a VXLAN. HookError on a value that cannot be used."""
    network = _our_network(text)
    if network is None:
        return None
    mark = network.find(f"metadata/{{{VXLAN_NS}}}vxlan")
    if mark is None:
        return None
    try:
        vni = int(mark.get("vni"))
    except (TypeError, ValueError):
        raise HookError(f"vni {mark.get('vni')!r} is not a number") from None
    if not 1 <= vni < 1 << 24:
        raise HookError(f"vni {vni} is out of VXLAN's range (1 to 16777215)")
    bridge = _bridge(network)
    mtu = _mtu(network)
    peers = [p.get("name")[len(PEER_PREFIX):] for p in network.findall("portgroup")
             if (p.get("name") or "").startswith(PEER_PREFIX)]
    return {"name": network.findtext("name"), "vni": vni, "bridge": bridge, "mtu": mtu,
            "peers": sorted({_ipv4(p, "peer") for p in peers}, key=_key)}


def parse_plugs(text):
    """The nodes' interfaces to plug back of a hook's XML: {name, bridge, mtu, macs} (the
    guests' MACs, as listed), or None when the network is not ours or lists none.
    HookError on a value that cannot be used."""
    network = _our_network(text)
    if network is None:
        return None
    listed = [p.get("mac") for p in network.findall(PLUGS)]
    if not listed:
        return None
    macs = []
    for mac in listed:
        if not MAC.match(mac or ""):
            raise HookError(f"plug mac {mac!r} is not a MAC address (xx:xx:xx:xx:xx:xx)")
        if mac.lower() not in macs:
            macs.append(mac.lower())
    return {"name": network.findtext("name"), "bridge": _bridge(network),
            "mtu": _mtu(network), "macs": macs}


def _ipv4(text, what):
    try:
        address = ipaddress.IPv4Address(text)
    except (ipaddress.AddressValueError, ValueError):
        raise HookError(f"{what} address {text!r} is not an IPv4 address") from None
    if address.is_multicast or address.is_unspecified or address.is_loopback:
        raise HookError(f"{what} address {address} is not a host's unicast address")
    return str(address)


def _key(address):
    return ipaddress.IPv4Address(address)


def device(vni):
    return f"vxlan{vni}"           # at most 13 characters (15 allowed)


def start_commands(vxlan):
    """The device made, put on the bridge and up, with one flood entry per peer."""
    dev = device(vxlan["vni"])
    commands = [["ip", "link", "add", dev, "type", "vxlan", "id", str(vxlan["vni"]),
                 "dstport", str(PORT)]]
    if vxlan["mtu"]:
        commands.append(["ip", "link", "set", dev, "mtu", vxlan["mtu"]])
    commands += [["ip", "link", "set", dev, "master", vxlan["bridge"]],
                 ["ip", "link", "set", dev, "up"]]
    return commands + fdb_commands(dev, [], vxlan["peers"])


def fdb_commands(dev, current, wanted):
    """The flood entries brought from `current` to `wanted` peers: removals first."""
    return ([["bridge", "fdb", "del", ZERO_MAC, "dev", dev, "dst", a]
             for a in current if a not in wanted]
            + [["bridge", "fdb", "append", ZERO_MAC, "dev", dev, "dst", a]
               for a in wanted if a not in current])


def flood_peers(fdb_text):
    """The peers of `bridge fdb show dev <vxlan>` output: its all-zeros entries' dst."""
    peers = []
    for line in fdb_text.splitlines():
        words = line.split()
        if words[:1] == [ZERO_MAC] and "dst" in words:
            peers.append(words[words.index("dst") + 1])
    return peers


def firewall_rules():
    """iptables rules (chain and match) dropping VXLAN from the project bridges: to this
    host (INPUT) and routed on to another (FORWARD; frames bridged within one network
    have `-o` the same bridge and are its own business)."""
    drop = ["-p", "udp", "--dport", str(PORT), "-j", "DROP"]
    return [["INPUT", "-i", BRIDGES, *drop],
            ["FORWARD", "-i", BRIDGES, "!", "-o", BRIDGES, *drop]]


def stop_commands(vxlan):
    return [["ip", "link", "del", device(vxlan["vni"])]]


def tap_mac(mac):
    """The MAC libvirt gives a guest's tap: the guest's, its first byte fe (high, so that
    a bridge, which takes the lowest of its ports' MACs, does not take a tap's)."""
    return "fe" + mac.lower()[2:]


def links(json_text):
    """The devices of `ip -j -d link show`: [{name, mac, master, kind, mtu}]; kind "tap"
    or "tun" for a tun device (iproute2's info_kind "tun" and its type), else its
    info_kind (None for a physical NIC)."""
    devices = []
    for link in json.loads(json_text or "[]"):
        info = link.get("linkinfo") or {}
        kind = info.get("info_kind")
        if kind == "tun":
            kind = (info.get("info_data") or {}).get("type") or "tun"
        devices.append({"name": link.get("ifname"),
                        "mac": (link.get("address") or "").lower(),
                        "master": link.get("master"), "kind": kind,
                        "mtu": str(link["mtu"]) if link.get("mtu") is not None else None})
    return devices


def plug_commands(plugs, devices):
    """The listed nodes' taps put back on the bridge (`devices` as `links` reads them):
    a tap (a tun device of type tap) with a listed node's tap MAC and on no bridge, which is what
    libvirt leaves when it removes a network's bridge under running guests. Its MTU is
    the network's first, when the network has one (a port with a larger MTU would lower
    the bridge's). A device on a bridge, this one or another (another network's guest),
    is never moved, nor a device that is not a tap."""
    wanted = {tap_mac(mac) for mac in plugs["macs"]}
    commands = []
    for dev in devices:
        if dev["mac"] not in wanted or dev["kind"] != TAP_KIND or dev["master"]:
            continue
        if plugs["mtu"] and dev["mtu"] != plugs["mtu"]:
            commands.append(["ip", "link", "set", "dev", dev["name"], "mtu", plugs["mtu"]])
        commands.append(["ip", "link", "set", "dev", dev["name"], "master", plugs["bridge"]])
    return commands


# -- what runs on the hypervisor

def _run(argv, check=True):
    done = subprocess.run(argv, capture_output=True, text=True, env={"PATH": PATH})
    if check and done.returncode != 0:
        raise HookError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


def master_of(link_text):
    """The bridge a device is a port of, from `ip -o link show dev X`, or None."""
    words = link_text.split()
    return words[words.index("master") + 1] if "master" in words else None


def _link(dev):
    """`ip -o link show dev <dev>` output, or None when there is no such device."""
    done = _run(["ip", "-o", "link", "show", "dev", dev], check=False)
    return done.stdout if done.returncode == 0 else None


def _exists(dev):
    return _link(dev) is not None


def _ours(vxlan, link_text):
    """Whether an existing device is this network's to remake or remove: on its bridge,
    or on none. A device on another bridge is another network's (another appliance on
    the same host, or a leftover) and is never taken over."""
    return master_of(link_text) in (None, vxlan["bridge"])


def _firewall():
    for rule in firewall_rules():
        if _run(["iptables", "-C", *rule], check=False).returncode != 0:
            _run(["iptables", "-I", *rule])


def handle(operation, vxlan):
    dev = device(vxlan["vni"])
    link = _link(dev)
    if link is not None and not _ours(vxlan, link):
        if operation == "stopped":
            return
        raise HookError(f"{dev} is a port of bridge {master_of(link)}, not of "
                        f"{vxlan['bridge']}: another network holds VXLAN id {vxlan['vni']}")
    if operation == "stopped":
        if link is not None:
            _run(stop_commands(vxlan)[0])
        return
    if operation == "updated" and link is not None:
        current = flood_peers(_run(["bridge", "fdb", "show", "dev", dev]).stdout)
        for argv in fdb_commands(dev, current, vxlan["peers"]):
            _run(argv)
        return
    _firewall()
    # started again (libvirtd restarted, or a start after a crash): made afresh
    if link is not None:
        _run(stop_commands(vxlan)[0])
    for argv in start_commands(vxlan):
        _run(argv)


def replug(plugs):
    devices = links(_run(["ip", "-j", "-d", "link", "show"]).stdout)
    for argv in plug_commands(plugs, devices):
        _run(argv)


def main(argv, stdin):
    operation = argv[2] if len(argv) > 2 else ""
    if operation not in ("started", "updated", "stopped"):
        return 0
    try:
        text = stdin.read()
        vxlan = parse(text)
        # every value checked before anything is done
        plugs = parse_plugs(text) if operation == "started" else None
        if vxlan is not None:
            handle(operation, vxlan)
        if plugs is not None:
            replug(plugs)
    except (HookError, ET.ParseError) as e:
        print(f"appliance-vxlan: network {argv[1] if len(argv) > 1 else '?'}: {e}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv, sys.stdin))
