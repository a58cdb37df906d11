"""The compute daemon's move of a node (appliance/compute/migrate.py) on libvirt's test
driver: two hypervisors, `test:///default` and a second test driver of its own read from
an XML file (a separate in-process hypervisor with its own pool).

The test driver has no migration, which is what these tests use it for: a move that
libvirt cannot do is refused at run time with libvirt's reason and the node stays, ACTIVE,
where it runs; a move the world made impossible since the API's answer is refused too; and
a daemon that died during a move finds the domain on whichever side it runs. The real move
between two libvirtds is in tests/compute/test_two_hypervisors.py."""

import libvirt
import pytest

from appliance.compute import domain_xml, migration, volumes
from appliance.compute.reconcile import Reconciler
from state.collection import format_time, utcnow
from tests.compute.reconcile_helpers import World

SECOND = """<node>
  <cpu><mhz>2000</mhz><model>i686</model><nodes>1</nodes><sockets>1</sockets>
    <cores>8</cores><threads>1</threads></cpu>
  <memory>4194304</memory>
  <pool type='dir'><name>default-pool</name>
    <uuid>35bb2ad9-388a-cdfe-461a-b8907f6e5301</uuid><capacity unit='G'>100</capacity>
    <allocation>0</allocation><available unit='G'>100</available>
    <target><path>/second-pool</path></target></pool>
</node>"""


class Two(World):
    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        path = tmp_path / "second.xml"
        path.write_text(SECOND)
        self.second_uri = f"test://{path}"
        self.second_conn = libvirt.open(self.second_uri)
        self.second = self.store.collection("compute_hypervisors").insert({
            **{k: v for k, v in self.hypervisor.items()
               if k not in ("uuid", "revision", "created_at", "updated_at")},
            "name": "second", "driver_spec": {**self.hypervisor["driver_spec"],
                                              "connection_uri": self.second_uri}})
        self.conns = {"test:///default": self.conn, self.second_uri: self.second_conn}

    def reconciler(self, cls=Reconciler):
        return cls(self.store, self.settings, connect=lambda uri: self.conns[uri])

    def close(self):
        for dom in self.second_conn.listAllDomains(0):
            if dom.isActive():
                dom.destroy()
            dom.undefine()
        super().close()


@pytest.fixture
def two(tmp_path):
    w = Two(tmp_path)
    yield w
    w.close()


def converge(rec, passes=3):
    for _ in range(passes):
        rec.pass_once()
    return rec


def ask(two, node, target):
    """What the API writes (resources.NodeActions.migrate)."""
    return two.store.collection("compute_nodes").update(node["uuid"], {
        "migration": migration.request(target, format_time(utcnow()), node["hypervisor"])})


def built(two):
    node = two.add_node(hypervisor=two.hypervisor["uuid"], status="SCHEDULED")
    rec = converge(two.reconciler())
    node = two.node(node["uuid"])
    assert node["status"] == "ACTIVE", node["status_reason"]
    assert node["hypervisor"] == two.hypervisor["uuid"]
    return rec, node


def wait_worker(rec, node):
    worker = rec.migrations.workers.get(node["uuid"])
    if worker is not None:
        worker.join(30)
        assert not worker.is_alive()


def second_volumes(two):
    return two.second_conn.storagePoolLookupByName("default-pool").listVolumes()


def test_a_move_libvirt_cannot_do_is_refused_and_the_node_stays(two):
    rec, node = built(two)
    before = two.conn.lookupByUUIDString(node["uuid"]).XMLDesc(0)
    ask(two, node, two.second)
    rec.pass_once()
    wait_worker(rec, node)
    after = two.node(node["uuid"])
    m = after["migration"]
    assert m["state"] == "refused", m
    assert "not supported" in m["reason"] and m["finished_at"], m
    assert (after["hypervisor"], after["status"]) == (two.hypervisor["uuid"], "ACTIVE")
    dom = two.conn.lookupByUUIDString(node["uuid"])
    assert dom.isActive() and dom.XMLDesc(0) == before
    # the target's disks made for the move were made first, then swept by the next
    # passes, as any disk of a node that is not there; the domain never went there
    converge(rec, 2)
    assert not [v for v in second_volumes(two) if node["uuid"] in v]
    assert not two.second_conn.listAllDomains(0)
    assert two.node(node["uuid"])["status"] == "ACTIVE"


def test_a_target_gone_since_the_ask_refuses_the_move(two):
    rec, node = built(two)
    ask(two, node, two.second)
    # the second hypervisor's libvirt is unreachable when the pass comes
    two.conns[two.second_uri] = None
    hvs = two.store.collection("compute_hypervisors")
    hvs.update(two.second["uuid"], {"driver_spec": {
        **two.second["driver_spec"], "connection_uri": "test:///nonexistent/file.xml"}})
    two.conns["test:///nonexistent/file.xml"] = None

    def connect(uri):
        if two.conns.get(uri) is None:
            raise libvirt.libvirtError(f"cannot reach {uri}")
        return two.conns[uri]
    rec.connect = connect
    rec.pass_once()
    after = two.node(node["uuid"])
    assert after["migration"]["state"] == "refused"
    assert "is not ACTIVE" in after["migration"]["reason"]
    assert after["hypervisor"] == two.hypervisor["uuid"] and after["status"] == "ACTIVE"
    assert two.conn.lookupByUUIDString(node["uuid"]).isActive()


def test_a_target_of_another_arch_is_refused_at_run_time(two):
    rec, node = built(two)
    ask(two, node, two.second)
    # written by the daemon's discovery: the second host turned out another arch
    hvs = two.store.collection("compute_hypervisors")
    real = two.second_conn.getInfo
    two.second_conn = _Arch(two.second_conn, "aarch64")
    two.conns[two.second_uri] = two.second_conn
    rec.conns.pop(two.second["uuid"])     # connect again, to the wrapper
    rec.pass_once()
    assert hvs.get(two.second["uuid"])["arch"] == "aarch64"
    after = two.node(node["uuid"])
    assert after["migration"]["state"] == "refused"
    assert "CPU architecture" in after["migration"]["reason"]
    assert after["hypervisor"] == two.hypervisor["uuid"]
    assert real()[0] == "i686"


class _Arch:
    """The second test hypervisor reporting another CPU arch (the test driver's is read
    from its file once; this one wrapper stands for a host of another architecture)."""

    def __init__(self, conn, arch):
        self._conn, self._arch = conn, arch

    def getInfo(self):
        return [self._arch] + list(self._conn.getInfo()[1:])

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_daemon_restart_after_the_move_finds_the_node_on_its_target(two):
    """The daemon died after libvirt moved the domain but before it wrote so: the next
    daemon finds it running on the target (and gone from the source) and records that."""
    rec, node = built(two)
    ask(two, node, two.second)
    nodes = two.store.collection("compute_nodes")
    node = nodes.update(node["uuid"], {"migration": {**nodes.get(node["uuid"])["migration"],
                                                     "state": "running", "progress": 40}})
    # what libvirt did: the domain defined and running on the target, gone at the source
    source = two.conn.lookupByUUIDString(node["uuid"])
    xml = source.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    source.destroy()
    source.undefine()
    two.second_conn.defineXML(xml).create()
    fresh = converge(two.reconciler(), 2)
    after = two.node(node["uuid"])
    assert (after["hypervisor"], after["migration"]["state"],
            after["migration"]["progress"]) == (two.second["uuid"], "done", 100)
    assert after["status"] == "ACTIVE"
    dom = two.second_conn.lookupByUUIDString(node["uuid"])
    assert dom.isActive()       # kept, not torn down as a stranger
    assert not [d for d in two.conn.listAllDomains(0) if d.UUIDString() == node["uuid"]]
    fresh.pass_once()
    assert two.node(node["uuid"])["status"] == "ACTIVE"


def test_a_moved_nodes_disks_and_volume_leave_the_source_pool(two):
    """After a move the source's copies (the node's disks and its attached volume's
    copy) are swept by the next pass; the target keeps its own."""
    rec, node = built(two)
    vols = two.store.collection("compute_volumes")
    vol = two.add_volume(node)
    converge(rec)
    name = f"appliance-vol-{vol['uuid']}.qcow2"
    first_pool = two.pool()
    assert name in first_pool.listVolumes()
    assert [v for v in first_pool.listVolumes() if node["uuid"] in v]
    # the move as libvirt leaves it (the domain defined and running on the target, gone
    # at the source), recorded by a daemon that finds it so
    ask(two, node, two.second)
    nodes = two.store.collection("compute_nodes")
    nodes.update(node["uuid"], {"migration": {**nodes.get(node["uuid"])["migration"],
                                              "state": "running", "progress": 90}})
    source = two.conn.lookupByUUIDString(node["uuid"])
    xml = source.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    source.destroy()
    source.undefine()
    two.second_conn.defineXML(xml).create()
    converge(two.reconciler(), 3)
    assert two.node(node["uuid"])["hypervisor"] == two.second["uuid"]
    assert vols.get(vol["uuid"])["hypervisor"] == two.second["uuid"]
    first_pool.refresh()
    assert name not in first_pool.listVolumes()
    assert not [v for v in first_pool.listVolumes() if node["uuid"] in v]
    # the target's copy of the volume is kept (its disks were made by the move itself,
    # which this simulation leaves out)
    assert name in second_volumes(two)


def test_a_volume_record_elsewhere_whose_copy_a_domain_here_uses_is_kept(two):
    """The sweep's safety: a volume whose record names another hypervisor is kept while a
    domain here has it attached (a move that failed after the record was written)."""
    node = two.add_node(hypervisor=two.hypervisor["uuid"], status="SCHEDULED")
    vols = two.store.collection("compute_volumes")
    vol = two.add_volume(node)
    converge(two.reconciler())
    name = f"appliance-vol-{vol['uuid']}.qcow2"
    path = two.pool().storageVolLookupByName(name).path()
    assert path in domain_xml.disks_of(
        two.conn.lookupByUUIDString(node["uuid"]).XMLDesc(0)).values()
    vols.update(vol["uuid"], {"hypervisor": two.second["uuid"]})
    volumes.sweep_pool(two.store, two.hypervisor, two.conn, "vm-")
    assert name in two.pool().listVolumes()
    # once no domain here uses it, it goes
    dom = two.conn.lookupByUUIDString(node["uuid"])
    dom.destroy()
    dom.undefine()
    volumes.sweep_pool(two.store, two.hypervisor, two.conn, "vm-")
    assert name not in two.pool().listVolumes()


def test_a_daemon_restart_during_the_move_leaves_the_node_where_it_runs(two):
    """The daemon died during the move: libvirt ends a migration with the connection of
    the process that drove it, so the domain runs on the source; the next daemon records
    the move failed, and removes an incoming domain left on the target."""
    rec, node = built(two)
    ask(two, node, two.second)
    nodes = two.store.collection("compute_nodes")
    node = nodes.update(node["uuid"], {"migration": {**nodes.get(node["uuid"])["migration"],
                                                     "state": "running", "progress": 10}})
    xml = two.conn.lookupByUUIDString(node["uuid"]).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    two.second_conn.createXML(xml, 0)       # an incoming (transient, running) domain
    # libvirt left the source paused: the copy ended, its confirmation never came
    two.conn.lookupByUUIDString(node["uuid"]).suspend()
    converge(two.reconciler(), 2)
    after = two.node(node["uuid"])
    assert after["migration"]["state"] == "failed"
    assert "stopped during the move" in after["migration"]["reason"]
    assert (after["hypervisor"], after["status"]) == (two.hypervisor["uuid"], "ACTIVE")
    source = two.conn.lookupByUUIDString(node["uuid"])
    assert source.state()[0] == libvirt.VIR_DOMAIN_RUNNING      # resumed
    assert not two.second_conn.listAllDomains(0)


def test_progress_is_the_jobs_share_of_its_data():
    from appliance.compute.migrate import destination_xml, migration_address, percent
    assert percent({"data_total": 200, "data_processed": 50}) == 25
    # libvirt without data_*: memory and disk added up
    assert percent({"memory_total": 100, "memory_processed": 100, "disk_total": 100,
                    "disk_processed": 0}) == 50
    # 100 is written once the move is done, never while it runs
    assert percent({"data_total": 10, "data_processed": 10}) == 99
    assert percent({}) == 0
    assert migration_address({"driver_spec": {
        "connection_uri": "qemu+ssh://root@10.1.2.3/system"}}) == "10.1.2.3"
    assert migration_address({"driver_spec": {"connection_uri": "qemu:///system",
                                              "migration_address": "hv2.local"}}) == "hv2.local"
    assert migration_address({"driver_spec": {"connection_uri": "qemu:///system"}}) is None
    # the underlay, where given, before the URI's host (the management connection)
    assert migration_address({"driver_spec": {
        "connection_uri": "qemu+ssh://root@192.0.2.9/system",
        "underlay_address": "10.1.2.4"}}) == "10.1.2.4"
    assert migration_address({"driver_spec": {"connection_uri": "qemu:///system",
                                              "underlay_address": "10.1.2.4",
                                              "migration_address": "10.1.2.5"}}) == "10.1.2.5"
    xml = ("<domain><devices><disk><source file='/a/vm-x-disk0.qcow2'/><target dev='vda'/>"
           "</disk><disk><source file='/a/seed.iso'/><target dev='hdc'/></disk>"
           "</devices></domain>")
    assert "/b/disk0" in destination_xml(xml, {"vda": "/b/disk0"})
    assert "/a/seed.iso" in destination_xml(xml, {"vda": "/b/disk0"})
    # to another machine: the file console becomes a pty, the devices stay as many
    chardevs = ("<domain><devices><serial type='file'><source path='/s/c.log'/>"
                "<target port='0'/></serial><serial type='pty'><target port='1'/></serial>"
                "<console type='file'><source path='/s/c.log'/><target type='serial' "
                "port='0'/></console></devices></domain>")
    import xml.etree.ElementTree as ET
    remote = ET.fromstring(destination_xml(chardevs, {}, file_console=False))
    assert [(c.tag, c.get("type")) for c in remote.find("devices")] == [
        ("serial", "pty"), ("serial", "pty"), ("console", "pty")]
    assert "/s/c.log" not in destination_xml(chardevs, {}, file_console=False)
    assert "/s/c.log" in destination_xml(chardevs, {})
