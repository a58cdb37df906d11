"""The compute daemon's infrastructure metrics (docs/metrics-infra.md): per hypervisor, the
capacity placement sees, and per VM, what libvirt counts of it.

Hypervisors: `appliance/compute/placement.py` is the one view of capacity (cores and RAM
with their ratios applied, disk without overcommit, minus what the placed nodes ask for);
these gauges show exactly that view, so a graph agrees with what placement decides.

VMs: read from the reconciler's open libvirt connections, at most every
`compute_stats_seconds`, from the daemon's process after a pass (one call in
daemons/compute.py). One getAllDomainStats call per hypervisor gives everything QEMU
counts; a driver that does not offer those groups (the test driver) is read per domain
with info(), blockStats() and interfaceStats(). Only domains carrying our mark count (a
foreign domain has no node, project or name of ours); the labels are the node's uuid,
name and project, so there is one series per VM and nothing else.
"""

import time
import xml.etree.ElementTree as ET

from appliance.infra_metrics import ResourceGauges, guarded, resource_gauge

from . import domain_xml, placement

HYPERVISORS, NODES = "compute_hypervisors", "compute_nodes"
SETTING = "compute_stats_seconds"

# published by the one compute daemon
_HV = ["hypervisor", "name"]
HV_CORES = resource_gauge(
    "appliance_hypervisor_cores", "Cores the hypervisor offers to placement (cores_ratio "
    "applied), by state: total, used, free.", _HV + ["state"])
HV_RAM = resource_gauge(
    "appliance_hypervisor_ram_bytes", "RAM the hypervisor offers to placement (ram_ratio "
    "applied), by state: total, used, free.", _HV + ["state"])
HV_DISK = resource_gauge(
    "appliance_hypervisor_disk_bytes", "Storage pool bytes of the hypervisor (not "
    "overcommitted), by state: total, used (asked by placed nodes), free.", _HV + ["state"])
HV_NODES = resource_gauge("appliance_hypervisor_nodes", "Nodes placed on the hypervisor.",
                          _HV)
HV_UP = resource_gauge("appliance_hypervisor_active", "1 when the hypervisor is ACTIVE "
                       "(takes nodes), else 0.", _HV)
HV_GAUGES = (HV_CORES, HV_RAM, HV_DISK, HV_NODES, HV_UP)

_VM = ["node", "name", "project"]
VM_CPU = resource_gauge("appliance_vm_cpu_seconds_total", "CPU time the VM has used "
                        "(libvirt), cumulative: use rate().", _VM)
VM_VCPUS = resource_gauge("appliance_vm_vcpus", "Virtual CPUs of the VM (libvirt).", _VM)
VM_MEMORY = resource_gauge(
    "appliance_vm_memory_bytes", "Memory of the VM (libvirt): the balloon's current size, "
    "or the maximum.", _VM + ["kind"])
VM_DISK = resource_gauge(
    "appliance_vm_disk_bytes_total", "Bytes the VM read from and wrote to its disks (all "
    "disks), cumulative.", _VM + ["direction"])
VM_NET = resource_gauge(
    "appliance_vm_network_bytes_total", "Bytes the VM received and sent on its interfaces "
    "(all interfaces), cumulative.", _VM + ["direction"])
VM_RUNNING = resource_gauge("appliance_vm_running", "1 when the VM's domain runs, else 0.",
                            _VM)
VM_GAUGES = (VM_CPU, VM_VCPUS, VM_MEMORY, VM_DISK, VM_NET, VM_RUNNING)

MB, GB = 1024 ** 2, 1024 ** 3
# what getAllDomainStats is asked for: state, cpu time, balloon, vcpus, interfaces, block
_STATS = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20


def hypervisor_values(hypervisors, nodes):
    """{gauge: {labels: value}} of every hypervisor, from placement's own arithmetic."""
    placed = [n for n in nodes if n.get("hypervisor")]
    out = {g: {} for g in HV_GAUGES}
    for hv in hypervisors:
        key = (hv["uuid"], hv.get("name") or "")
        total = placement.capacity(hv)
        left = placement.free(hv, placed)
        for gauge, scale, t, f in zip((HV_CORES, HV_RAM, HV_DISK), (1, MB, GB), total, left):
            out[gauge][key + ("total",)] = t * scale
            out[gauge][key + ("used",)] = (t - f) * scale
            out[gauge][key + ("free",)] = f * scale
        out[HV_NODES][key] = sum(1 for n in placed if n["hypervisor"] == hv["uuid"])
        out[HV_UP][key] = 1 if hv.get("status") == "ACTIVE" else 0
    return out


def _devices(xml):
    """(disk targets, interface targets) of a domain's XML."""
    root = ET.fromstring(xml)
    disks = [t.get("dev") for t in root.findall("devices/disk/target") if t.get("dev")]
    nics = [t.get("dev") for t in root.findall("devices/interface/target") if t.get("dev")]
    return disks, nics


def domain_numbers(dom, record=None):
    """{cpu_seconds, vcpus, memory, memory_max, rd, wr, rx, tx, running} of one domain:
    from a getAllDomainStats record when it has the groups, else per call."""
    record = record or {}
    if "cpu.time" in record:
        n = {"cpu_seconds": record["cpu.time"] / 1e9,
             "vcpus": record.get("vcpu.current", 0),
             "memory": record.get("balloon.current", 0) * 1024,
             "memory_max": record.get("balloon.maximum", 0) * 1024,
             "running": 1 if record.get("state.state") == 1 else 0}
        for key, field in (("rd", "rd.bytes"), ("wr", "wr.bytes")):
            n[key] = sum(record.get(f"block.{i}.{field}", 0)
                         for i in range(record.get("block.count", 0)))
        for key, field in (("rx", "rx.bytes"), ("tx", "tx.bytes")):
            n[key] = sum(record.get(f"net.{i}.{field}", 0)
                         for i in range(record.get("net.count", 0)))
        return n
    state, max_kib, kib, vcpus, cpu_ns = dom.info()[:5]
    n = {"cpu_seconds": cpu_ns / 1e9, "vcpus": vcpus, "memory": kib * 1024,
         "memory_max": max_kib * 1024, "running": 1 if state == 1 else 0,
         "rd": 0, "wr": 0, "rx": 0, "tx": 0}
    if not n["running"]:
        return n
    disks, nics = _devices(dom.XMLDesc(0))
    for dev in disks:
        try:
            s = dom.blockStats(dev)
        except Exception:
            continue            # a cdrom without media, a disk being detached
        n["rd"] += s[1]
        n["wr"] += s[3]
    for dev in nics:
        try:
            s = dom.interfaceStats(dev)
        except Exception:
            continue
        n["rx"] += s[0]
        n["tx"] += s[4]
    return n


def vm_values(conns, marks, nodes):
    """{gauge: {labels: value}} of our domains on every connection. `conns`: hypervisor
    uuid -> libvirt connection; `marks`: (hypervisor uuid, domain UUID) -> mark, filled
    here for a domain not seen yet; `nodes`: node uuid -> record."""
    out = {g: {} for g in VM_GAUGES}
    for hv_uuid, conn in conns.items():
        try:
            listed = conn.getAllDomainStats(_STATS, 0)
        except Exception:
            listed = [(dom, {}) for dom in conn.listAllDomains(0)]
        for dom, record in listed:
            key = (hv_uuid, dom.UUIDString())
            if key not in marks:
                marks[key] = domain_xml.read_mark(dom.XMLDesc(0))
            mark = marks[key]
            node = nodes.get(mark["uuid"]) if mark else None
            if node is None:
                continue
            try:
                n = domain_numbers(dom, record)
            except Exception:
                continue        # undefined meanwhile: the next round does without it
            labels = (node["uuid"], node.get("name") or "", node.get("project_id") or "")
            out[VM_CPU][labels] = n["cpu_seconds"]
            out[VM_VCPUS][labels] = n["vcpus"]
            out[VM_MEMORY][labels + ("current",)] = n["memory"]
            out[VM_MEMORY][labels + ("maximum",)] = n["memory_max"]
            out[VM_DISK][labels + ("read",)] = n["rd"]
            out[VM_DISK][labels + ("write",)] = n["wr"]
            out[VM_NET][labels + ("rx",)] = n["rx"]
            out[VM_NET][labels + ("tx",)] = n["tx"]
            out[VM_RUNNING][labels] = n["running"]
    return out


class ComputeStats:
    """Publishes both families; `after_pass(reconciler)` is the one call the daemon
    makes. Hypervisor capacity is cheap (store records only) and follows every pass; the
    VMs are read at most every `compute_stats_seconds`."""

    def __init__(self, store, settings, clock=time.monotonic):
        self.store, self.clock = store, clock
        self.every = float(settings.get(SETTING) or 15.0)
        self.hypervisors = ResourceGauges(*HV_GAUGES)
        self.vms = ResourceGauges(*VM_GAUGES)
        self._next_vms = 0.0

    def vms_due(self):
        return self.clock() >= self._next_vms

    def after_pass(self, reconciler):
        """Never raises: a failure counts in appliance_infra_collection_errors_total."""
        guarded("hypervisor", self.publish_hypervisors)
        if self.vms_due():
            self._next_vms = self.clock() + self.every
            guarded("vm", self.publish_vms, reconciler)

    def publish_hypervisors(self):
        self.hypervisors.publish(hypervisor_values(
            self.store.collection(HYPERVISORS).records(),
            self.store.collection(NODES).records()))

    def publish_vms(self, reconciler):
        conns = {hv: conn for hv, (_uri, conn) in list(reconciler.conns.items())}
        nodes = {n["uuid"]: n for n in self.store.collection(NODES).records()}
        self.vms.publish(vm_values(conns, reconciler.marks.by_domain, nodes))
