"""The compute reconciler (appliance/compute/reconcile.py) on libvirt's `test:///default`.

The test driver keeps its state inside the connection, so each test drives Reconcilers
in-process over one shared connection (World.conn) instead of running the daemon process.
"""

import libvirt
import pytest

from appliance.compute import domain_xml
from appliance.compute.reconcile import Reconciler
from tests.compute.reconcile_helpers import PROJECT, World


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.close()


def converge(world, passes=3, reconciler=None):
    rec = reconciler or world.reconciler()
    for _ in range(passes):
        rec.pass_once()
    return rec


def test_hypervisor_discovered_active_with_capacity(world):
    converge(world, 1)
    hv = world.store.collection("compute_hypervisors").get(world.hypervisor["uuid"])
    assert hv["status"] == "ACTIVE" and hv["status_reason"] is None
    cores, ram = world.conn.getInfo()[2], world.conn.getInfo()[1]
    assert (hv["all_cores"], hv["all_ram"], hv["all_disk"]) == (cores, ram, 100)
    assert (hv["avail_cores"], hv["avail_ram"], hv["avail_disk"]) == (cores, ram, 100)
    assert hv["accel"] is None      # the test driver is not QEMU
    assert hv["accel_reason"] == "not a QEMU hypervisor"


def test_local_hyper_runs_like_libvirt_on_its_uri(world):
    """The reference's exordos_local_hyper (its CLI's `hypervisors init --add`): the
    daemon drives it as libvirt on its connection_uri, with the pool its list names."""
    coll = world.store.collection("compute_hypervisors")
    coll.update(world.hypervisor["uuid"], {"driver_spec": {
        **world.hypervisor["driver_spec"], "kind": "exordos_local_hyper",
        "node": "5b0c9a1e-0000-4000-8000-000000000001",
        "storage_pool": [{"name": "default-pool", "tier": None, "ephemeral": False}]}})
    node = world.add_node()
    converge(world)
    hv = coll.get(world.hypervisor["uuid"])
    assert hv["status"] == "ACTIVE" and hv["all_disk"] == 100, hv["status_reason"]
    assert world.node(node["uuid"])["status"] == "ACTIVE"
    assert world.pool().listVolumes()


def test_unreachable_hypervisor_is_error_with_the_libvirt_error(world):
    coll = world.store.collection("compute_hypervisors")
    coll.update(world.hypervisor["uuid"], {"driver_spec": {
        **world.hypervisor["driver_spec"], "connection_uri": "test:///nonexistent/file.xml"}})
    Reconciler(world.store, world.settings).pass_once()
    hv = coll.get(world.hypervisor["uuid"])
    assert hv["status"] == "ERROR" and "nonexistent" in hv["status_reason"]


def test_missing_storage_pool_is_error(world):
    coll = world.store.collection("compute_hypervisors")
    coll.update(world.hypervisor["uuid"], {"driver_spec": {
        **world.hypervisor["driver_spec"], "storage_pool": "nope"}})
    converge(world, 1)
    hv = coll.get(world.hypervisor["uuid"])
    assert hv["status"] == "ERROR" and hv["status_reason"].startswith("storage pool 'nope'")


def test_node_becomes_a_running_marked_domain(world):
    node = world.add_node(cores=2, ram=1024)
    converge(world)
    node = world.node(node["uuid"])
    assert node["status"] == "ACTIVE", node["status_reason"]
    assert node["hypervisor"] == world.hypervisor["uuid"]
    dn = node["default_network"]
    assert dn["ipv4"] == "10.32.0.20" and dn["mac"].startswith("52:54:00:")
    dom = world.domain(node["uuid"])
    assert dom.isActive() and dom.name() == "vm-" + node["uuid"]
    xml = dom.XMLDesc(0)
    assert domain_xml.read_mark(xml)["uuid"] == node["uuid"]
    assert domain_xml.shape_of(xml) == (2, 1024)
    assert f"address='{dn['mac']}'" in xml
    # on the libvirt network net's reconcile_networks defined for the node's network
    assert f"<source network='appliance-{dn['network']}'" in xml
    disks = domain_xml.disks_of(xml)
    assert disks["vda"].endswith(f"vm-{node['uuid']}-disk0.qcow2")
    assert disks["hdc"].endswith(node["uuid"] + ".iso")
    hv = world.store.collection("compute_hypervisors").get(world.hypervisor["uuid"])
    assert hv["avail_cores"] == hv["all_cores"] - 2 and hv["avail_disk"] == 90


def test_a_converged_pass_writes_nothing(world):
    world.add_node()
    rec = converge(world)
    before = {k: world.store.collection(k).snapshot().key for k in Reconciler.kinds}
    rec.pass_once()
    assert {k: world.store.collection(k).snapshot().key for k in Reconciler.kinds} == before


def test_image_downloaded_once_with_its_checksum(world):
    a, b = world.add_node("a"), world.add_node("b")
    rec = converge(world)
    assert world.hits.count("base.raw") == 1
    meta = rec.images.cached(world.url("base.raw"))
    assert meta["format"] == "raw" and len(meta["sha256"]) == 64
    for n in (a, b):
        assert world.node(n["uuid"])["status"] == "ACTIVE"


def test_unknown_image_url_is_error_with_a_reason_and_nothing_defined(world):
    node = world.add_node(image="missing.raw")
    converge(world)
    node = world.node(node["uuid"])
    assert node["status"] == "ERROR"
    assert "HTTP 404" in node["status_reason"] and "missing.raw" in node["status_reason"]
    assert world.domain(node["uuid"]) is None


def test_unreachable_image_host_is_error_not_a_hang(world):
    node = world.add_node()
    world.store.collection("compute_nodes").update(node["uuid"], {"disk_spec": {
        "kind": "root_disk", "size": 10, "image": "http://127.0.0.1:9/x.raw"}})
    converge(world, 1)
    node = world.node(node["uuid"])
    assert node["status"] == "ERROR" and "cannot download" in node["status_reason"]


def test_delete_removes_domain_disks_and_releases_the_address(world):
    keep, doomed = world.add_node("keep"), world.add_node("doomed")
    converge(world)
    ipv4 = world.node(doomed["uuid"])["default_network"]["ipv4"]
    world.store.collection("compute_nodes").delete(doomed["uuid"])
    converge(world, 1)
    assert world.domain(doomed["uuid"]) is None
    assert not [v for v in world.pool().listVolumes() if doomed["uuid"] in v]
    assert world.store.collection("network_ports").by("node", doomed["uuid"]) == []
    assert world.domain(keep["uuid"]).isActive()
    # the address is held for a DHCP lease's time (appliance/network/ports.py), then
    # free again: the next node gets a fresh one meanwhile, the one after the hold it
    assert world.store.collection("network_address_holds").find_one(ipv4=ipv4)
    fresh = world.add_node("fresh")
    converge(world)
    assert world.node(fresh["uuid"])["default_network"]["ipv4"] not in (ipv4, None)
    holds = world.store.collection("network_address_holds")
    hold = holds.find_one(ipv4=ipv4)
    holds.update(hold["uuid"], {"released_at": 0})
    again = world.add_node("again")
    converge(world)
    assert world.node(again["uuid"])["default_network"]["ipv4"] == ipv4


def test_foreign_domain_is_reported_and_never_touched(world, caplog):
    foreign = world.conn.defineXML(
        "<domain type='test'><name>not-ours</name><memory>65536</memory>"
        "<os><type>hvm</type></os></domain>")
    before = foreign.XMLDesc(0)
    world.add_node()
    rec = converge(world)
    assert "not-ours" in rec.foreign[world.hypervisor["uuid"]]
    assert "'not-ours' has no appliance mark" in caplog.text
    dom = world.conn.lookupByName("not-ours")
    assert not dom.isActive() and dom.XMLDesc(0) == before
    # nor is the test driver's own domain
    assert world.conn.lookupByName("test").isActive()


def test_unplaceable_node_is_error_naming_what_is_short(world):
    node = world.add_node(cores=64)
    converge(world)
    node = world.node(node["uuid"])
    assert node["status"] == "ERROR" and node["hypervisor"] is None
    assert node["status_reason"].startswith("no hypervisor has enough cores (needs 64")


def test_power_off_on_and_reboot(world):
    node = world.add_node()
    converge(world)
    nodes = world.store.collection("compute_nodes")
    nodes.update(node["uuid"], {"power_state": "off"})
    converge(world)
    assert not world.domain(node["uuid"]).isActive()
    assert world.node(node["uuid"])["status"] == "ACTIVE"
    nodes.update(node["uuid"], {"power_state": "on"})
    converge(world)
    dom = world.domain(node["uuid"])
    assert dom.isActive()
    reboots = []

    class Counting(Reconciler):
        def reboot(self, dom):
            reboots.append(dom.name())
            super().reboot(dom)
    nodes.update(node["uuid"], {"reboot_requested_at": "2026-11-23T02:00:00Z"})
    converge(world, 3, world.reconciler(Counting))
    dom = world.domain(node["uuid"])
    assert dom.isActive() and reboots == ["vm-" + node["uuid"]]
    assert domain_xml.read_mark(dom.XMLDesc(0))["reboot"] == "2026-11-23T02:00:00Z"
    # honoured once: neither later passes nor a restarted daemon reboot it again
    converge(world, 2, world.reconciler(Counting))
    assert reboots == ["vm-" + node["uuid"]]
    assert world.node(node["uuid"])["status"] == "ACTIVE"


def test_a_restarted_daemon_gives_a_running_domain_the_type_of_the_hypervisors_accel(world):
    """A daemon restarted where KVM now works (the probe's answer stands in: the test
    driver has no KVM) redefines a TCG domain as KVM, without stopping the guest; and
    back to TCG when KVM goes away."""
    node = world.add_node()
    converge(world)
    dom = world.domain(node["uuid"])
    assert domain_xml.type_of(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)) == "qemu"
    uri = world.hypervisor["driver_spec"]["connection_uri"]
    for accel, want in (("kvm", "kvm"), ("tcg", "qemu")):
        restarted = world.reconciler()
        restarted.hypervisors.accel[uri] = accel
        restarted.hypervisors.accel_reason[uri] = "the probe's answer"
        id_before = dom.ID()
        converge(world, 2, restarted)
        dom = world.domain(node["uuid"])
        inactive = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert domain_xml.type_of(inactive) == want
        assert "host-passthrough" in inactive if accel == "kvm" else \
            "host-passthrough" not in inactive
        assert dom.isActive() and dom.ID() == id_before     # not restarted for it
        assert world.node(node["uuid"])["status"] == "ACTIVE"
        hv = world.store.collection("compute_hypervisors").get(world.hypervisor["uuid"])
        assert (hv["accel"], hv["accel_reason"]) == (accel, "the probe's answer")


def test_image_change_replaces_the_root_disk_only(world):
    node = world.add_node()
    vol = world.add_volume(node, size=2)
    converge(world)
    before = world.node(node["uuid"])
    data_path = world.pool().storageVolLookupByName(
        f"appliance-vol-{vol['uuid']}.qcow2").path()
    assert data_path in domain_xml.disks_of(world.domain(node["uuid"]).XMLDesc(0)).values()
    world.store.collection("compute_nodes").update(node["uuid"], {
        "disk_spec": {"kind": "root_disk", "size": 10, "image": world.url("other.qcow2")},
        "status": "IN_PROGRESS"})
    converge(world)
    after = world.node(node["uuid"])
    assert after["status"] == "ACTIVE", after["status_reason"]
    dom = world.domain(node["uuid"])
    xml = dom.XMLDesc(0)
    assert domain_xml.read_mark(xml)["image"] == world.url("other.qcow2")
    assert data_path in domain_xml.disks_of(xml).values()
    assert after["default_network"] == before["default_network"]
    assert world.hits.count("other.qcow2") == 1


def test_volume_attached_and_detached_live_and_deleted(world):
    node = world.add_node()
    converge(world)
    vols = world.store.collection("compute_volumes")
    vol = world.add_volume()
    converge(world)
    vol = vols.get(vol["uuid"])
    assert vol["status"] == "ACTIVE" and vol["hypervisor"] == world.hypervisor["uuid"]
    name = f"appliance-vol-{vol['uuid']}.qcow2"
    path = world.pool().storageVolLookupByName(name).path()
    dom = world.domain(node["uuid"])
    vols.update(vol["uuid"], {"node": "/v1/compute/nodes/" + node["uuid"]})
    converge(world)
    # the test driver has no live attach: the domain's config holds it for the next start
    # (live attach under QEMU is the end-to-end test's)
    config = libvirt.VIR_DOMAIN_XML_INACTIVE
    assert dom.isActive() and path in domain_xml.disks_of(dom.XMLDesc(config)).values()
    vols.update(vol["uuid"], {"node": None})
    converge(world)
    assert dom.isActive() and path not in domain_xml.disks_of(dom.XMLDesc(config)).values()
    vols.delete(vol["uuid"])
    converge(world)
    assert name not in world.pool().listVolumes()


STEPS = ("images", "disks", "seed", "define", "start", "active")


class Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so nothing in the pass catches it."""


@pytest.mark.parametrize("step", STEPS)
def test_killed_mid_creation_converges(world, step):
    """The daemon killed mid-creation converges: the pass is stopped dead at `step` of a
    node's creation, then a NEW Reconciler (a restarted daemon: empty memory) on the same
    connection (the test driver's state lives in it) must finish the job, with one
    domain, one port and no stray disk."""
    class Dying(Reconciler):
        def step(self, name, node_uuid):
            if name == step:
                raise Killed(name)
    node = world.add_node()
    with pytest.raises(Killed):
        world.reconciler(Dying).pass_once()
    converge(world, 3, world.reconciler())
    node = world.node(node["uuid"])
    assert node["status"] == "ACTIVE", node["status_reason"]
    assert world.domain(node["uuid"]).isActive()
    ours = [d for d in world.conn.listAllDomains(0) if d.name().startswith("vm-")]
    assert len(ours) == 1
    assert len(world.store.collection("network_ports").records()) == 1
    assert sorted(world.pool().listVolumes()) == [f"vm-{node['uuid']}-disk0.qcow2"]


def test_domain_stopped_on_its_own_is_restarted_then_error(world):
    node = world.add_node()
    rec = converge(world)
    for _ in range(3):
        world.domain(node["uuid"]).destroy()
        rec.converged.clear()       # what the lifecycle event does
        rec.pass_once()
        assert world.domain(node["uuid"]).isActive()
    world.domain(node["uuid"]).destroy()
    rec.converged.clear()
    rec.pass_once()
    node = world.node(node["uuid"])
    assert node["status"] == "ERROR" and "stopped on its own" in node["status_reason"]


def test_reconnects_after_the_connection_is_lost(world):
    calls = []
    conns = iter([libvirt.open("test:///default"), world.conn])

    def connect(uri):
        calls.append(uri)
        return next(conns)
    rec = Reconciler(world.store, world.settings, connect=connect)
    rec.pass_once()
    rec.conns[world.hypervisor["uuid"]][1].close()     # libvirtd went away
    world.add_node()
    rec.pass_once()
    rec.pass_once()
    assert len(calls) == 2
    assert world.store.collection("compute_nodes").records()[0]["status"] == "ACTIVE"


class Reachable:
    """The test driver's connection as a remote one that can go away: while `down`, it
    is not alive and no new one opens (what ssh to a vanished host gives). A stand-in:
    test:///default cannot lose its host; the real loss over qemu+ssh is
    tests/compute/test_two_hypervisors.py."""

    def __init__(self, conn):
        self.conn, self.down, self.defined = conn, False, 0

    def open(self, uri):
        if self.down:
            raise libvirt.libvirtError("Cannot recv data: ssh: connect to host 10.99.0.2 "
                                       "port 22: No route to host: Connection reset by peer")
        return self

    def isAlive(self):
        return not self.down

    def defineXML(self, xml):
        self.defined += 1
        return self.conn.defineXML(xml)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def test_nodes_of_an_unreachable_hypervisor_go_error_and_come_back_without_a_rebuild(world):
    link = Reachable(world.conn)
    rec = Reconciler(world.store, world.settings, connect=link.open)
    node = world.add_node()
    converge(world, 3, rec)
    assert world.node(node["uuid"])["status"] == "ACTIVE"
    dom_id, defined = world.domain(node["uuid"]).ID(), link.defined

    link.down = True
    rec.pass_once()
    hv = world.store.collection("compute_hypervisors").get(world.hypervisor["uuid"])
    assert hv["status"] == "ERROR" and "No route to host" in hv["status_reason"]
    down = world.node(node["uuid"])
    assert down["status"] == "ERROR"
    assert down["status_reason"].startswith(
        f"hypervisor test ({hv['uuid']}) is unreachable: ")
    assert "No route to host" in down["status_reason"]
    assert down["hypervisor"] == hv["uuid"]          # not placed elsewhere meanwhile
    rec.pass_once()                                  # still down: nothing new written
    assert world.node(node["uuid"])["revision"] == down["revision"]

    link.down = False
    rec.pass_once()
    back = world.node(node["uuid"])
    assert (back["status"], back["status_reason"]) == ("ACTIVE", None)
    assert world.store.collection("compute_hypervisors").get(hv["uuid"])["status"] == "ACTIVE"
    # the same running domain: not redefined, not restarted
    assert world.domain(node["uuid"]).ID() == dom_id and link.defined == defined
    rec.pass_once()
    assert world.node(node["uuid"])["revision"] == back["revision"]


def test_a_hypervisor_lost_mid_pass_puts_its_nodes_in_error_and_the_pass_goes_on(world):
    link = Reachable(world.conn)
    rec = Reconciler(world.store, world.settings, connect=link.open)
    node = world.add_node()
    converge(world, 3, rec)

    def vanish(*_args):
        link.down = True
        raise libvirt.libvirtError("Cannot write data: Broken pipe")
    link.listAllDomains = vanish           # the host goes while the pass reads it
    rec.pass_once()                        # no exception out of the pass
    hv = world.store.collection("compute_hypervisors").get(world.hypervisor["uuid"])
    assert hv["status"] == "ERROR" and "Broken pipe" in hv["status_reason"]
    assert "is unreachable: Cannot write data" in world.node(node["uuid"])["status_reason"]
    del link.listAllDomains
    link.down = False
    rec.pass_once()
    assert world.node(node["uuid"])["status"] == "ACTIVE"


def test_set_members_become_domains_scale_down_and_roll_an_image(world):
    """capi's reconcile_sets plans the members; the pass turns them into domains."""
    sets = world.store.collection("compute_sets")
    node_set = sets.insert({
        "name": "web", "description": "", "project_id": PROJECT, "replicas": 2,
        "cores": 1, "ram": 512, "node_type": "VM", "set_type": "SET", "tags": [],
        "disk_spec": {"kind": "root_disk", "image": world.url("base.raw"), "size": 5},
        "placement_policies": [], "network": None, "nodes": {}, "status": "NEW",
        "status_reason": None})
    converge(world, 4)
    members = world.store.collection("compute_nodes").by("node_set", node_set["uuid"])
    assert len(members) == 2 and all(m["status"] == "ACTIVE" for m in members)
    assert all(world.domain(m["uuid"]).isActive() for m in members)
    assert sets.get(node_set["uuid"])["status"] == "ACTIVE"
    sets.update(node_set["uuid"], {"disk_spec": {
        "kind": "root_disk", "image": world.url("other.qcow2"), "size": 5}})
    converge(world, 8)
    for m in world.store.collection("compute_nodes").by("node_set", node_set["uuid"]):
        mark = domain_xml.read_mark(world.domain(m["uuid"]).XMLDesc(0))
        assert mark["image"] == world.url("other.qcow2") and m["status"] == "ACTIVE"
    assert sets.get(node_set["uuid"])["status"] == "ACTIVE"
    sets.update(node_set["uuid"], {"replicas": 1})
    converge(world, 3)
    (left,) = world.store.collection("compute_nodes").by("node_set", node_set["uuid"])
    gone = [m for m in members if m["uuid"] != left["uuid"]]
    assert [world.domain(m["uuid"]) for m in gone] == [None]
    assert len(world.store.collection("network_ports").records()) == 1


def test_address_of_a_deleted_node_held_while_a_hypervisor_is_down(world):
    node = world.add_node()
    converge(world)
    world.store.collection("compute_hypervisors").insert({
        "name": "down", "driver_spec": {"kind": "libvirt",
                                        "connection_uri": "test:///nonexistent.xml"},
        "cores_ratio": 1.0, "ram_ratio": 1.0, "status": "IN_PROGRESS"})
    world.store.collection("compute_nodes").delete(node["uuid"])
    rec = Reconciler(world.store, world.settings,
                     connect=lambda uri: world.conn if uri == "test:///default"
                     else libvirt.open(uri))
    rec.pass_once()
    assert world.domain(node["uuid"]) is None
    assert world.store.collection("network_ports").by("node", node["uuid"])
    world.store.collection("compute_hypervisors").delete_where(lambda h: h["name"] == "down")
    rec.pass_once()
    assert not world.store.collection("network_ports").by("node", node["uuid"])


def test_a_put_after_the_restart_limit_starts_afresh(world):
    node = world.add_node()
    rec = converge(world)
    for _ in range(4):
        world.domain(node["uuid"]).destroy()
        rec.converged.clear()
        rec.pass_once()
    assert world.node(node["uuid"])["status"] == "ERROR"
    rec.pass_once()
    assert not world.domain(node["uuid"]).isActive()     # no loop within the window
    world.store.collection("compute_nodes").update(node["uuid"], {"status": "IN_PROGRESS"})
    rec.pass_once()
    assert world.node(node["uuid"])["status"] == "ACTIVE"
    assert world.domain(node["uuid"]).isActive()


def test_an_image_named_by_a_repository_artifact_is_downloaded_from_its_uri(world):
    artifacts = world.store.collection("repo_artifacts")
    image = artifacts.insert({"element": None, "project_id": PROJECT,
                              "urn": "images:0f8a1c2e-0000-4000-8000-000000000001",
                              "uri": world.url("base.raw.gz")})
    node = world.add_node(disk_spec={"kind": "root_disk", "size": 10,
                                     "image": f"/v1/repo/artifacts/{image['uuid']}"})
    converge(world)
    assert world.node(node["uuid"])["status"] == "ACTIVE"
    assert "base.raw.gz" in world.hits

    # the artifact gone (its element removed): a node made from it now is ERROR, saying so
    artifacts.delete(image["uuid"])
    late = world.add_node(name="n2", disk_spec={
        "kind": "root_disk", "size": 10, "image": f"/v1/repo/artifacts/{image['uuid']}"})
    converge(world)
    late = world.node(late["uuid"])
    assert late["status"] == "ERROR" and "no repository artifact" in late["status_reason"]
    assert world.domain(late["uuid"]) is None


def test_a_hw_node_is_left_alone(world):
    """The appliance registers itself as an ACTIVE HW node at first boot: the daemon
    neither places it nor writes its status."""
    node = world.add_node(node_type="HW", disk_spec=None, status="ACTIVE")
    converge(world)
    after = world.node(node["uuid"])
    assert (after["status"], after["hypervisor"], after["revision"]) == (
        "ACTIVE", None, node["revision"])
    assert world.domain(node["uuid"]) is None
