"""The domain XML (appliance/compute/domain_xml.py): what libvirt is handed, read back
through libvirt's test driver so that the XML is also known to be valid."""

import libvirt
import pytest

from appliance.compute import domain_xml
from appliance.compute.hypervisors import detect_accel

NODE = {"uuid": "7b0a8f52-0a38-4a4e-9ea5-4f3f5c1c2d11", "name": "web 1", "cores": 2,
        "ram": 1536}
DISKS = [{"path": "/default-pool/root.qcow2", "dev": "vda"},
         {"path": "/default-pool/data.qcow2", "dev": "vdb", "serial": "vol1"},
         {"path": "/seeds/n.iso", "dev": "hdc", "device": "cdrom", "format": "raw"}]
PORT = {"mac": "52:54:00:aa:bb:cc", "bridge": "ap-0123456789ab"}


@pytest.fixture
def conn():
    c = libvirt.open("test:///default")
    yield c
    for dom in c.listAllDomains(0):
        if dom.name() != "test":
            dom.undefine()


def build(accel=None, network="appliance-net"):
    return domain_xml.build(NODE, "vm-" + NODE["uuid"], accel, DISKS, PORT, network,
                            "/state/compute/console/n.log", image="http://i/x.raw")


def test_kvm_only_when_detected():
    assert build("kvm").startswith("<domain ") and "type=\"kvm\"" in build("kvm")[:80]
    for accel in ("tcg", None):
        assert 'type="qemu"' in build(accel)[:80]
    assert "host-passthrough" in build("kvm") and "host-passthrough" not in build("tcg")


def test_libvirt_reads_back_mark_disks_nic_and_console(conn):
    dom = conn.defineXML(build())
    xml = dom.XMLDesc(0)
    assert dom.UUIDString() == NODE["uuid"]
    assert domain_xml.read_mark(xml) == {"uuid": NODE["uuid"], "image": "http://i/x.raw"}
    assert domain_xml.shape_of(xml) == (2, 1536)
    assert domain_xml.disks_of(xml) == {"vda": "/default-pool/root.qcow2",
                                       "vdb": "/default-pool/data.qcow2",
                                       "hdc": "/seeds/n.iso"}
    assert "<source network='appliance-net'/>" in xml
    assert "<mac address='52:54:00:aa:bb:cc'/>" in xml and "<model type='virtio'/>" in xml
    assert "<source path='/state/compute/console/n.log' append='on'/>" in xml
    assert "<serial type='pty'>" in xml
    assert xml.count("bus='virtio'") == 2 and "bus='ide'" in xml     # the seed: a cdrom
    assert "<readonly/>" in xml


def test_a_domain_on_another_machine_has_a_pty_console_and_no_file(conn):
    # qemu+ssh: the appliance's console directory is not on that machine
    xml = conn.defineXML(domain_xml.build(NODE, "vm-" + NODE["uuid"], None, DISKS, PORT,
                                          "appliance-net", None)).XMLDesc(0)
    assert "<serial type='pty'>" in xml and "<console type='pty'>" in xml
    assert "<serial type='file'>" not in xml and "append='on'" not in xml


def test_without_a_libvirt_network_the_nic_joins_the_bridge(conn):
    xml = conn.defineXML(build(network=None)).XMLDesc(0)
    assert "<source bridge='ap-0123456789ab'/>" in xml


def test_read_mark_ignores_foreign_and_broken_xml():
    assert domain_xml.read_mark("<domain><name>x</name></domain>") is None
    assert domain_xml.read_mark("<domain><metadata><other xmlns='urn:x' uuid='1'/>"
                                "</metadata></domain>") is None
    assert domain_xml.read_mark("not xml") is None


def test_accel_detection_on_the_test_driver_is_none(conn):
    assert detect_accel(conn) is None


class FakeCaps:
    """Only getCapabilities (and no domains, for the leftover-probe sweep): enough for
    the branches that decide without probing."""

    def __init__(self, caps):
        self.caps = caps

    def listAllDomains(self, flags):
        return []

    def getCapabilities(self):
        return self.caps


def test_accel_is_tcg_when_only_qemu_is_offered():
    assert detect_accel(FakeCaps("<guest><arch><domain type='qemu'/></arch></guest>")) == "tcg"
