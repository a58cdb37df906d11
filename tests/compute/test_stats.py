"""Infrastructure metrics of compute (appliance/compute/stats.py) on libvirt's
`test:///default`: the hypervisor's capacity as placement sees it, and a VM's numbers as
the test driver counts them (its domains report real, if made-up, cpu time, memory, and
block and interface counters)."""

import math

import pytest

from appliance.compute import placement, stats
from tests.compute.reconcile_helpers import World
from tests.metrics_reading import value

MB, GB = 1024 ** 2, 1024 ** 3


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.close()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def converged(world, passes=3):
    rec = world.reconciler()
    for _ in range(passes):
        rec.pass_once()
    return rec


def test_hypervisor_capacity_is_placements_view(world):
    node = world.add_node(cores=2, ram=1024, size=10)
    rec = converged(world)
    assert world.node(node["uuid"])["status"] == "ACTIVE"
    stats.ComputeStats(world.store, world.settings).after_pass(rec)
    hv = world.store.collection("compute_hypervisors").get(world.hypervisor["uuid"])
    cores, ram, disk = placement.capacity(hv)
    labels = {"hypervisor": hv["uuid"], "name": "test"}
    assert value("appliance_hypervisor_cores", state="total", **labels) == cores
    assert value("appliance_hypervisor_cores", state="used", **labels) == 2
    assert value("appliance_hypervisor_cores", state="free", **labels) == hv["avail_cores"]
    assert value("appliance_hypervisor_ram_bytes", state="used", **labels) == 1024 * MB
    assert value("appliance_hypervisor_ram_bytes", state="free", **labels) == \
        hv["avail_ram"] * MB
    assert value("appliance_hypervisor_disk_bytes", state="total", **labels) == disk * GB
    assert value("appliance_hypervisor_disk_bytes", state="free", **labels) == \
        hv["avail_disk"] * GB == 90 * GB
    assert value("appliance_hypervisor_nodes", **labels) == 1
    assert value("appliance_hypervisor_active", **labels) == 1


def test_vm_numbers_come_from_libvirt(world):
    node = world.add_node(name="web-1", cores=2, ram=1024)
    rec = converged(world)
    dom = world.domain(node["uuid"])
    assert dom.isActive()
    stats.ComputeStats(world.store, world.settings).after_pass(rec)
    labels = {"node": node["uuid"], "name": "web-1", "project": node["project_id"]}
    state, max_kib, kib, vcpus, cpu_ns = dom.info()[:5]
    # the test driver's cpu time is the wall clock: it only grows
    assert value("appliance_vm_cpu_seconds_total", **labels) <= dom.info()[4] / 1e9
    assert value("appliance_vm_cpu_seconds_total", **labels) > 0
    assert value("appliance_vm_vcpus", **labels) == vcpus == 2
    assert value("appliance_vm_memory_bytes", kind="maximum", **labels) == max_kib * 1024
    assert value("appliance_vm_running", **labels) == 1
    block = dom.blockStats("vda")
    assert value("appliance_vm_disk_bytes_total", direction="read", **labels) >= block[1] > 0
    nic = stats._devices(dom.XMLDesc(0))[1]
    assert nic, "the domain has an interface"
    rx = sum(dom.interfaceStats(dev)[0] for dev in nic)
    assert value("appliance_vm_network_bytes_total", direction="rx", **labels) > 0
    assert rx > 0
    # the test driver's own domain carries no mark of ours: no series for it
    test_dom = world.conn.lookupByName("test")
    assert value("appliance_vm_running", node=test_dom.UUIDString()) is None


def test_vm_read_at_most_every_setting_and_gone_vm_leaves(world):
    node = world.add_node(name="short-lived")
    rec = converged(world)
    clock = Clock()
    collector = stats.ComputeStats(world.store, {**world.settings,
                                                 "compute_stats_seconds": 60}, clock=clock)
    collector.after_pass(rec)
    first = value("appliance_vm_cpu_seconds_total", node=node["uuid"])
    assert first is not None
    clock.now = 30.0
    collector.after_pass(rec)           # within the interval: libvirt is not read again
    assert value("appliance_vm_cpu_seconds_total", node=node["uuid"]) == first
    world.store.collection("compute_nodes").delete(node["uuid"])
    converged(world, 2)
    clock.now = 61.0
    collector.after_pass(rec)
    assert value("appliance_vm_cpu_seconds_total", node=node["uuid"]) is None
    assert value("appliance_hypervisor_nodes", hypervisor=world.hypervisor["uuid"]) == 0


def test_a_failing_collection_counts_and_never_raises(world):
    rec = converged(world, 1)
    before = value("appliance_infra_collection_errors_total", family="vm") or 0

    class Broken:
        conns = property(lambda self: 1 / 0)
        marks = {}
    stats.ComputeStats(world.store, world.settings).after_pass(Broken())
    assert value("appliance_infra_collection_errors_total", family="vm") == before + 1
    assert not math.isnan(value("appliance_hypervisor_cores",
                                hypervisor=world.hypervisor["uuid"], state="total"))
    assert rec is not None


def test_the_daemon_process_publishes_through_multiprocess_files(tmp_path):
    """`python -m daemons.compute` with PROMETHEUS_MULTIPROC_DIR, as the platform runs it:
    another process reads the hypervisor family from the files. (Its libvirt is its own
    test:///default, whose only domain is foreign: no VM series.)"""
    from prometheus_client import CollectorRegistry

    from appliance.metrics import merged_files

    from state import Store
    from tests.compute.reconcile_helpers import TEST_URI
    from tests.secret.conftest import DaemonProcess, wait_for

    state_dir, prom = tmp_path / "state", tmp_path / "prom"
    prom.mkdir()
    store = Store(str(state_dir))
    hv = store.collection("compute_hypervisors").insert({
        "name": "local", "description": "", "machine_type": "VM",
        "driver_spec": {"kind": "libvirt", "connection_uri": TEST_URI,
                        "storage_pool": "default-pool"},
        "cores_ratio": 2.0, "ram_ratio": 1.0, "status": "IN_PROGRESS",
        "status_reason": None, "all_cores": 0, "all_ram": 0, "all_disk": 0,
        "avail_cores": 0, "avail_ram": 0, "avail_disk": 0, "accel": None})
    daemon = DaemonProcess("compute", str(state_dir),
                           env={"PROMETHEUS_MULTIPROC_DIR": str(prom)}).start()
    try:
        registry = CollectorRegistry()

        class Files:
            """The daemon's files, read as the API's /metrics reads them."""
            def collect(self):
                return merged_files(str(prom))
        registry.register(Files())

        def total():
            return value("appliance_hypervisor_cores", registry, hypervisor=hv["uuid"],
                         state="total")
        # the first pass waits on the daemon's start (imports, libvirt)
        wait_for(total, timeout=60)
        active = store.collection("compute_hypervisors").get(hv["uuid"])
        assert total() == active["all_cores"] * 2.0
        assert value("appliance_hypervisor_active", registry, hypervisor=hv["uuid"]) == 1
        assert daemon.proc.poll() is None
    finally:
        daemon.stop()
        store.close()
