"""A node moved live between two real libvirtds (appliance/compute/migrate.py), under TCG.

Two test network namespaces (tests/compute/netns.py), each with its own libvirtd, joined by
a veth pair (the link QEMU migrates over: each hypervisor's `migration_address`); the
compute reconciler runs in this process on both, as the daemon does. The node's image is a
boot sector, not an OS: it stamps the TSC once at boot and then counts in a loop, both in
guest memory that virDomainMemoryPeek reads. So "a process keeps running across the move"
is seen in the guest's own memory: after the move, on the target, the boot stamp is the
one from before (the same boot, not a restart) and the counter has gone on from where it
was. SSH to the node's address after a move needs the node image booted: that is the
two-hypervisor environment's test (tests/compute/test_two_hypervisors.py, when it lands).

Root only (skips otherwise, with the reason); CI runs as root.
"""

import os
import struct
import subprocess
import time
import xml.etree.ElementTree as ET

import libvirt
import pytest

from appliance.compute import migration
from appliance.compute.reconcile import Reconciler
from state.collection import format_time, utcnow
from tests.compute import netns as netns_mod
from tests.compute.netns import Netns
from tests.compute.reconcile_helpers import World

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# cli; xor ax,ax; mov ds,ax; rdtsc; mov [0x7e04],eax; mov [0x7e08],edx;
# loop: inc dword [0x7e00]; jmp loop
COUNTER = bytes.fromhex("fa31c08ed80f3166a3047e668916087e66ff06007eebf9")
LINK = ("10.252.0.1", "10.252.0.2")


def counter_image():
    sector = COUNTER + b"\x00" * (510 - len(COUNTER)) + b"\x55\xaa"
    return sector + b"\x00" * (1 << 20)


def guest_memory(dom):
    """(count, boot stamp) from the guest's memory."""
    raw = dom.memoryPeek(0x7e00, 12, libvirt.VIR_MEMORY_PHYSICAL)
    count, low, high = struct.unpack("<III", raw)
    return count, (high << 32) | low


class Pair(World):
    """World (store, settings, image server) with two netns hypervisors instead of the
    test driver's."""

    def __init__(self, tmp_path, a, b):
        super().__init__(tmp_path)
        with open(os.path.join(self.image_dir, "counter.raw"), "wb") as f:
            f.write(counter_image())
        hvs = self.store.collection("compute_hypervisors")
        hvs.delete(self.hypervisor["uuid"])
        self.hvs = []
        for ns, address in ((a, LINK[0]), (b, LINK[1])):
            self.hvs.append(hvs.insert({
                **{k: v for k, v in self.hypervisor.items()
                   if k not in ("uuid", "revision", "created_at", "updated_at")},
                "name": ns.name, "driver_spec": {
                    "kind": "libvirt", "connection_uri": ns.uri, "storage_pool": "default",
                    "machine_prefix": "vm-", "migration_address": address}}))

    def reconciler(self, cls=Reconciler):
        return cls(self.store, self.settings)


@pytest.fixture(scope="module")
def two_namespaces():
    netns_mod.require()
    with Netns("mga") as a, Netns("mgb") as b:
        subprocess.run(["ip", "link", "add", "mig0", "netns", a.name, "type", "veth",
                        "peer", "name", "mig1", "netns", b.name], check=True)
        for ns, dev, address in ((a, "mig0", LINK[0]), (b, "mig1", LINK[1])):
            ns.run(["ip", "addr", "add", f"{address}/30", "dev", dev], check=True)
            ns.run(["ip", "link", "set", dev, "up"], check=True)
        yield a, b


def test_a_running_node_moves_live_and_keeps_running(two_namespaces, tmp_path):
    a, b = two_namespaces
    pair = Pair(tmp_path, a, b)
    try:
        _move(pair, a, b)
    finally:
        pair.http.stop()
        pair.store.close()


def _move(pair, a, b):
    hv_a, hv_b = pair.hvs
    node = pair.add_node(image="counter.raw", size=1, hypervisor=hv_a["uuid"],
                         status="SCHEDULED")
    rec = pair.reconciler()
    deadline = time.monotonic() + 300
    while pair.node(node["uuid"])["status"] != "ACTIVE":
        assert pair.node(node["uuid"])["status"] != "ERROR", pair.node(node["uuid"])
        assert time.monotonic() < deadline
        rec.pass_once()
    conn_a, conn_b = a.connect(), b.connect()
    source = conn_a.lookupByUUIDString(node["uuid"])
    while guest_memory(source)[0] == 0:     # the boot sector is counting
        time.sleep(0.2)
    count_before, boot = guest_memory(source)
    port = pair.store.collection("network_ports").by("node", node["uuid"])[0]
    assert boot != 0

    node = pair.node(node["uuid"])
    pair.store.collection("compute_nodes").update(node["uuid"], {
        "migration": migration.request(pair.store.collection("compute_hypervisors").get(
            hv_b["uuid"]), format_time(utcnow()), hv_a["uuid"])})
    seen = []
    rec.pass_once()
    deadline = time.monotonic() + 600
    while migration.under_way(pair.node(node["uuid"])):
        m = pair.node(node["uuid"])["migration"]
        if m.get("progress") is not None and (not seen or seen[-1] != m["progress"]):
            seen.append(m["progress"])
        assert time.monotonic() < deadline, m
        time.sleep(0.2)
    moved = pair.node(node["uuid"])
    m = moved["migration"]
    assert m["state"] == "done", m
    assert (moved["hypervisor"], moved["status"], m["progress"]) == (hv_b["uuid"], "ACTIVE",
                                                                     100)
    assert seen == sorted(seen) and all(0 <= p <= 100 for p in seen), seen

    # the same boot, still counting, on the target; gone from the source
    target = conn_b.lookupByUUIDString(node["uuid"])
    assert target.isActive() and target.isPersistent()
    count_after, boot_after = guest_memory(target)
    assert boot_after == boot and count_after != count_before
    assert not [d for d in conn_a.listAllDomains(0) if d.UUIDString() == node["uuid"]]
    # its MAC and address: the same port, and the target's network leases it that address
    xml = ET.fromstring(target.XMLDesc(0))
    assert xml.find("devices/interface/mac").get("address") == port["mac"]
    assert moved["default_network"]["ipv4"] == port["ipv4"]
    net = conn_b.networkLookupByName(xml.find("devices/interface/source").get("network"))
    hosts = ET.fromstring(net.XMLDesc()).findall("ip/dhcp/host")
    assert (port["mac"], port["ipv4"]) in [(h.get("mac"), h.get("ip")) for h in hosts]
    # its disks are the target's pool's now
    pool_b = conn_b.storagePoolLookupByName("default")
    pool_b.refresh()
    assert any(node["uuid"] in v for v in pool_b.listVolumes())
    assert all(p.startswith(b.pool_dir) for p in _disk_paths(xml))

    # the next passes leave it running as it is (no redefine, no restart) and sweep the
    # source's copies of its disks
    for _ in range(2):
        rec.pass_once()
    again = conn_b.lookupByUUIDString(node["uuid"])
    assert again.isActive() and guest_memory(again)[1] == boot
    assert pair.node(node["uuid"])["status"] == "ACTIVE"
    pool_a = conn_a.storagePoolLookupByName("default")
    pool_a.refresh()
    assert not [v for v in pool_a.listVolumes() if node["uuid"] in v]


def _disk_paths(xml):
    return [d.find("source").get("file") for d in xml.findall("devices/disk")
            if d.find("source") is not None]
