"""The test network namespace with its own libvirtd (tests/compute/netns.py), on its own.

Root only (skips otherwise, with the reason); CI runs as root.
"""

import os
import socket
import subprocess
import xml.etree.ElementTree as ET

import pytest

from tests.compute import netns as netns_mod
from tests.compute.netns import Netns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MAC = "52:54:00:aa:00:14"
NETWORK_XML = f"""
<network>
  <name>appliance-t-iso</name>
  <bridge name='apt-t-br0'/>
  <ip address='10.20.0.1' netmask='255.255.252.0'>
    <dhcp>
      <range start='10.20.0.20' end='10.20.3.254'/>
      <host mac='{MAC}' ip='10.20.0.20'/>
    </dhcp>
  </ip>
</network>
"""


@pytest.fixture(scope="module")
def ns():
    netns_mod.require()
    with Netns() as ns:
        yield ns


@pytest.fixture(scope="module")
def conn(ns):
    c = ns.connect()
    yield c
    c.close()


@pytest.fixture(scope="module")
def network(conn):
    net = conn.networkDefineXML(NETWORK_XML)
    net.create()
    return net


def test_libvirtd_answers_on_the_uri_from_the_host(ns, conn):
    assert ns.uri.startswith("qemu:///system?socket=/")
    assert conn.getVersion() > 0
    # the host's definitions were left behind: only the harness's pool, no network yet
    assert conn.listStoragePools() == ["default"]
    pool = conn.storagePoolLookupByName("default")
    assert pool.isActive()
    assert ET.fromstring(pool.XMLDesc()).findtext("target/path") == ns.pool_dir
    # the /dev/kvm trap is covered: libvirt offers plain QEMU (TCG) only
    domains = {d.get("type") for d in ET.fromstring(conn.getCapabilities()).iter("domain")}
    assert "qemu" in domains and "kvm" not in domains


def test_isolated_network_with_fixed_dhcp_host_starts_inside(ns, network):
    assert network.isActive()
    hosts = ET.fromstring(network.XMLDesc()).findall("ip/dhcp/host")
    assert [(h.get("mac"), h.get("ip")) for h in hosts] == [(MAC, "10.20.0.20")]
    # the bridge and its dnsmasq are the namespace's, not the host's
    assert ns.run(["ip", "-br", "addr", "show", "apt-t-br0"]).stdout.split()[2] == "10.20.0.1/22"
    assert subprocess.run(["ip", "link", "show", "apt-t-br0"], capture_output=True).returncode != 0
    dnsmasq = [p for p in ns.pids() if _comm(p) == "dnsmasq"]
    assert dnsmasq
    # the fixed host is in dnsmasq's host file, which libvirt regenerates on every change
    with open(os.path.join(ns.path("lib"), "dnsmasq", "appliance-t-iso.hostsfile")) as f:
        assert f.read().split() == [f"{MAC},10.20.0.20"]


def test_nothing_routes_out_of_the_namespace(ns, network):
    inside = ns.run(["ip", "route", "get", "1.1.1.1"])
    assert inside.returncode != 0
    assert "Network is unreachable" in inside.stderr
    # the command works: the guests' own subnet is routed (onto the bridge)
    assert "dev apt-t-br0" in ns.run(["ip", "route", "get", "10.20.0.20"], check=True).stdout
    # and a socket made inside (ns.inside(), as the tests' HTTP clients do) cannot leave
    with ns.inside(), socket.socket() as s:
        assert s.connect_ex(("1.1.1.1", 80)) == 101          # ENETUNREACH
    # while this thread is back on the host afterwards: its own namespace, not the test's
    with open("/proc/thread-self/ns/net") as f1, open(f"/run/netns/{ns.name}") as f2:
        assert os.fstat(f1.fileno()).st_ino != os.fstat(f2.fileno()).st_ino


def test_a_tcg_guest_starts_on_the_network(ns, conn, network, tmp_path):
    # no disk: SeaBIOS finds nothing to boot and waits, enough to see QEMU run in there
    dom = conn.createXML(f"""
        <domain type='qemu'>
          <name>apt-t-diskless</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>
          <os><type arch='x86_64'>hvm</type></os>
          <devices>
            <interface type='network'><source network='appliance-t-iso'/><mac address='{MAC}'/>
              <model type='virtio'/></interface>
            <serial type='file'><source path='{tmp_path}/console.log'/></serial>
          </devices>
        </domain>""")
    try:
        assert dom.isActive()
        assert any(_comm(p).startswith("qemu-system") for p in ns.pids())
        assert "-accel tcg" in _cmdline(dom, ns) or "accel=tcg" in _cmdline(dom, ns)
    finally:
        dom.destroy()


def test_teardown_leaves_no_namespace_process_or_mount():
    netns_mod.require()
    ns = Netns()
    with pytest.raises(RuntimeError, match="a failing test"):
        with ns:
            conn = ns.connect()
            conn.networkDefineXML(NETWORK_XML).create()
            conn.close()
            pids, name, root = ns.pids(), ns.name, ns.root
            comms = {_comm(p) for p in pids}
            assert {"libvirtd", "virtlogd", "dnsmasq"} <= comms
            assert ns.mounts_on_host()                   # /run/netns/<name> while it lives
            # the private mounts are libvirtd's, invisible to the host
            libvirtd = [p for p in pids if _comm(p) == "libvirtd"][0]
            with open(f"/proc/{libvirtd}/mountinfo") as f:
                assert root in f.read()
            raise RuntimeError("a failing test")
    assert name not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                      text=True).stdout.split()
    assert not os.path.exists(f"/run/netns/{name}")
    # gone, or a zombie that init has yet to reap (slow here: machine-facts)
    assert [p for p in pids if netns_mod.alive(p)] == []
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    assert name not in mounts and root not in mounts
    assert not os.path.exists(root)
    ns.close()                                           # twice is harmless


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _cmdline(dom, ns):
    pid = int(open(ns.path("run", "qemu", f"{dom.name()}.pid")).read())
    with open(f"/proc/{pid}/cmdline") as f:
        return f.read().replace("\0", " ")
