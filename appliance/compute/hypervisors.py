"""The hypervisors of a pass (docs/compute-daemon.md, step 2): one kept connection each,
what each offers (cores, RAM, the pool's disk, acceleration), and its status: ACTIVE, or
ERROR with libvirt's message. A dead connection (libvirtd restarted) is reopened on the
next pass; what was cached about its domains is dropped then (`on_lost`). A qemu+ssh
hypervisor is opened with the platform's key and its pinned host key (remote.py); one
that does not answer is `down`, and its nodes go ERROR with the reason (nodes.py)."""

from . import kvm_probe, migration, placement, remote
from .virt import GB, HYPERVISORS, NODES, NodeFailure, libvirt, log, pool_of, reason, write


def detect_accel(conn):
    """'kvm' when a KVM guest really runs on this hypervisor, 'tcg' when only QEMU's
    emulator is offered or KVM does not really work, None when the driver is not QEMU
    (test:///). The probe and why it leaves nothing behind: appliance/compute/kvm_probe.py."""
    return kvm_probe.probe_accel(conn)[0]


class Hypervisors:
    """`conns`: hypervisor uuid -> (what was opened, connection); `accel`: uri -> "kvm" |
    "tcg" | None, probed once per URI, and `accel_reason`: uri -> why (the probe's words).
    `on_open(conn)` is called for each new connection (events), `on_lost(hv_uuid)` when one
    is found dead. `down`: hypervisor uuid -> why, for those that did not answer in the last
    refresh. `ssh_dir` holds the files of qemu+ssh connections (remote.py); `keyfile()`
    gives the platform key's path."""

    def __init__(self, store, connect, on_open, on_lost, ssh_dir=None, keyfile=None):
        self.store, self.connect = store, connect
        self.on_open, self.on_lost = on_open, on_lost
        self.ssh_dir = ssh_dir
        self.keyfile = keyfile or (lambda: remote.key_path(store))
        self.conns = {}
        self.accel = {}
        self.accel_reason = {}
        self.down = {}

    def refresh(self):
        """{uuid: (record, connection)} of the hypervisors that answer, each written ACTIVE
        with what it offers; the others written ERROR (and listed in `down` when they did
        not answer at all)."""
        coll = self.store.collection(HYPERVISORS)
        active, placed = {}, None
        self.down = {}
        for hv in coll.records():
            spec = hv.get("driver_spec") or {}
            uri = spec.get("connection_uri")
            try:
                conn = self.connection(hv["uuid"], spec)
            except (libvirt.libvirtError, remote.SpecError) as e:
                self.unreachable(hv, remote.explain(uri, reason(e)))
                continue
            try:
                found = discover(conn, uri, spec, self.accel, self.accel_reason)
            except libvirt.libvirtError as e:
                if not conn.isAlive():
                    self.unreachable(hv, remote.explain(uri, reason(e)))
                else:
                    write(coll, hv, status="ERROR", status_reason=reason(e))
                continue
            except NodeFailure as e:
                write(coll, hv, status="ERROR", status_reason=str(e))
                continue
            if hv.get("status") != "ACTIVE" or hv.get("avail_disk") is None:
                # what is free goes with ACTIVE in one write: a reader never sees an
                # ACTIVE hypervisor without its capacity (the pass's end refreshes it)
                if placed is None:
                    placed = _placed(self.store)
                cores, ram, disk = placement.free({**hv, **found}, placed)
                found.update(avail_cores=int(cores), avail_ram=int(ram), avail_disk=int(disk))
            hv = write(coll, hv, status="ACTIVE", status_reason=None, **found) or hv
            active[hv["uuid"]] = (hv, conn)
        for gone in set(self.conns) - {h["uuid"] for h in coll.records()}:
            del self.conns[gone]
        return active

    def unreachable(self, hv, why):
        """The hypervisor did not answer (or stopped answering mid-pass): ERROR with why,
        its connection dropped, and listed in `down` (its nodes follow: nodes.py)."""
        log.warning("hypervisor %s: unreachable: %s", hv.get("name") or hv["uuid"], why)
        if self.conns.pop(hv["uuid"], None) is not None:
            self.on_lost(hv["uuid"])
        current = self.store.collection(HYPERVISORS).get(hv["uuid"]) or hv
        write(self.store.collection(HYPERVISORS), current, status="ERROR", status_reason=why)
        self.down[hv["uuid"]] = why

    def connection(self, hv_uuid, spec):
        uri = spec.get("connection_uri")
        # the pinned key is part of what was opened: a new one reopens the connection
        opened = (uri, remote.pinned_digest(spec))
        known = self.conns.get(hv_uuid)
        if known is not None:
            if known[0] == opened and known[1].isAlive():
                return known[1]
            log.warning("hypervisor %s: connection to %s lost; reconnecting", hv_uuid, uri)
            self.conns.pop(hv_uuid, None)
            self.on_lost(hv_uuid)
        target = uri
        if remote.is_remote_ssh(uri):
            target = remote.libvirt_uri(uri, spec, hv_uuid, self.ssh_dir, self.keyfile())
        conn = self.connect(target)
        self.on_open(conn)
        self.conns[hv_uuid] = (opened, conn)
        return conn

    def first(self, fallback):
        """The hypervisor that holds loose volumes: the first connected one."""
        return min(self.conns) if self.conns else fallback


def _placed(store):
    # a node being moved holds room on its target too (migration.reserved)
    return migration.reserved([n for n in store.collection(NODES).records()
                               if n.get("hypervisor")])


def discover(conn, uri, spec, accel, accel_reason):
    """What the hypervisor offers; its acceleration probed once per URI (into `accel`,
    and why into `accel_reason`)."""
    _model, ram_mb, cpus = conn.getInfo()[:3]
    pool_name = pool_of(spec)
    try:
        pool = conn.storagePoolLookupByName(pool_name)
    except libvirt.libvirtError:
        raise NodeFailure(f"storage pool {pool_name!r} not found on {uri}") from None
    if not pool.isActive():
        pool.create(0)
    capacity = pool.info()[1]
    if uri not in accel:
        accel[uri], accel_reason[uri] = kvm_probe.probe_accel(conn)
        log.info("hypervisor %s: acceleration %s (%s)", uri, accel[uri] or "none",
                 accel_reason[uri])
    return {"all_cores": int(cpus), "all_ram": int(ram_mb), "all_disk": int(capacity // GB),
            "accel": accel[uri], "accel_reason": accel_reason.get(uri), "arch": _model}


def write_capacity(store, active):
    """Each ACTIVE hypervisor's `avail_*`, after the pass placed and built its nodes."""
    coll = store.collection(HYPERVISORS)
    placed = _placed(store)
    for hv_uuid in active:
        current = coll.get(hv_uuid)
        if current is None:
            continue
        cores, ram, disk = placement.free(current, placed)
        write(coll, current, avail_cores=int(cores), avail_ram=int(ram),
              avail_disk=int(disk))
