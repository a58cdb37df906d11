"""The compute daemon's move of a node to another hypervisor (docs/compute-daemon.md,
"Moving a node"): libvirt's live migration with the disks copied, run beside the pass.

The API wrote `migration` {target, state "requested"} on the node (migration.py holds
the rules). A pass, after every hypervisor is converged (so the target already runs the
node's network with its DHCP host entry: appliance/network/reconcile.py counts a node
being moved on its target), calls `Migrations.step`:

1. checks again what may have moved since the API's answer (both hypervisors ACTIVE
   and connected, same accel and arch, the domain running), else the move is "refused"
   with the reason and the node stays, ACTIVE, where it is;
2. prepares the target on the pass's thread: the node's disks made in the target's pool
   first (overlays of the same cached images, uploaded there; the attached volumes as
   blank qcow2 of their size), the seed ISO uploaded, and the destination XML: the
   domain's own, with each disk's path on the target;
3. starts a worker thread for `virDomainMigrate3` (LIVE, PERSIST_DEST, UNDEFINE_SOURCE,
   NON_SHARED_INC: libvirt 9.0 copies only each disk's top layer over NBD, onto the
   target's overlay of the same backing image, and cannot pre-create the targets itself
   for an incremental copy, hence step 2) and writes the job's progress (percent of the
   data the job counts, memory and disks) into `migration.progress` about every second;
4. at the end writes the node's `hypervisor` (and its volumes') to the target, state
   "done"; or "refused" (libvirt cannot do it: an unsupported driver or flag) or "failed"
   with libvirt's reason, the node left where libvirt left the domain: on its source.

The pass leaves a node being moved alone on both sides (no converge on the source, no
teardown of the incoming domain nor sweep of its new disks on the target). What is left
behind by a failed move (the target's disks), or by a done one (the source's disks and
attached volumes' copies), is swept by the next pass, as any volume of a node or volume
that is not there (volumes.sweep_pool). A daemon that died during a move finds on its next start a
"running" move with no worker: it looks for the domain on both sides and writes where it
runs (`_recover`).
"""

import os
import threading
import urllib.parse
import xml.etree.ElementTree as ET

from state import NotFound
from state.collection import format_time, utcnow

from . import migration, remote, volume_xml, volumes
from .domain_xml import disks_of
from .domains import images_of
from .images import ImageError, reach_for
from .images import resolve as resolve_image
from .lifecycle import wants_power
from .virt import NODES, VOLUMES, NodeFailure, hv_pool, libvirt, log, machine_prefix, reason

PROGRESS_SECONDS = 1.0
# libvirt's answers that mean "this cannot be done here" rather than "it went wrong"
_CANNOT = ("VIR_ERR_NO_SUPPORT", "VIR_ERR_OPERATION_UNSUPPORTED",
           "VIR_ERR_ARGUMENT_UNSUPPORTED", "VIR_ERR_OPERATION_INVALID")


def flags():
    return (libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST
            | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE | libvirt.VIR_MIGRATE_NON_SHARED_INC)


def migration_address(hv):
    """Where the other hypervisors' QEMU reach this one: `driver_spec.migration_address`,
    else its `underlay_address` (the hypervisors' own network, which project networks
    already cross), else the host of its connection URI (qemu+ssh://root@10.0.0.2/system),
    else None (libvirt's default: the target's own hostname)."""
    spec = hv.get("driver_spec") or {}
    for field in ("migration_address", "underlay_address"):
        if spec.get(field):
            return spec[field]
    host = urllib.parse.urlsplit(spec.get("connection_uri") or "").hostname
    return host or None


def destination_xml(source_xml, paths, file_console=True):
    """The domain's XML with each disk's source replaced by `paths[target dev]`. Without
    `file_console` (a target on another machine, which has not the appliance's state
    directory for the console log) each file serial and console becomes a pty, in place:
    a device dropped would break the ABI a live domain keeps."""
    root = ET.fromstring(source_xml)
    for disk in root.findall("devices/disk"):
        target, source = disk.find("target"), disk.find("source")
        if target is not None and source is not None and target.get("dev") in paths:
            source.set("file", paths[target.get("dev")])
    if not file_console:
        for chardev in root.findall("devices/serial") + root.findall("devices/console"):
            if chardev.get("type") == "file":
                chardev.set("type", "pty")
                for source in chardev.findall("source"):
                    chardev.remove(source)
    return ET.tostring(root, encoding="unicode")


def percent(stats):
    """The job's progress from virDomainGetJobStats: processed of total data (RAM and
    disks), 0-99 while it runs (100 is written once it is done)."""
    total, done = stats.get("data_total") or 0, stats.get("data_processed") or 0
    if not total:
        total = (stats.get("memory_total") or 0) + (stats.get("disk_total") or 0)
        done = (stats.get("memory_processed") or 0) + (stats.get("disk_processed") or 0)
    if not total:
        return 0
    return max(0, min(99, int(100 * done / total)))


def _cannot(error):
    return any(error.get_error_code() == getattr(libvirt, name, None) for name in _CANNOT)


class Migrations:
    """The moves under way in this process (`workers`: node uuid -> thread)."""

    def __init__(self, rec):
        self.rec = rec
        self.workers = {}

    def busy(self, node_uuid):
        worker = self.workers.get(node_uuid)
        return worker is not None and worker.is_alive()

    def step(self, active):
        """Start the moves asked for; recover the ones a dead daemon left running."""
        for node in self.rec.store.collection(NODES).records():
            if not migration.under_way(node) or self.busy(node["uuid"]):
                continue
            if node["migration"]["state"] == migration.RUNNING:
                self._recover(node, active)
            else:
                self._start(node, active)

    # -- starting

    def _start(self, node, active):
        m = node["migration"]
        source, target = active.get(node.get("hypervisor")), active.get(m["target"])
        why = None
        if source is None:
            why = f"the node's hypervisor {node.get('hypervisor')} is not ACTIVE"
        elif target is None:
            why = f"hypervisor {m['target']} is not ACTIVE"
        elif node.get("status") != "ACTIVE" or not wants_power(node):
            why = f"the node is {node.get('status')}, power {node.get('power_state')}: " \
                  "only a running ACTIVE node is moved"
        else:
            why = migration.compatible(source[0], target[0])
            if why is None and machine_prefix(source[0]) != machine_prefix(target[0]):
                why = ("the hypervisors name domains with different machine_prefix "
                       f"({machine_prefix(source[0])!r}, {machine_prefix(target[0])!r}): "
                       "a domain is not renamed by a move")
        if why is not None:
            self._finish(node, migration.REFUSED, why)
            return
        try:
            dom = source[1].lookupByUUIDString(node["uuid"])
            if not dom.isActive():
                raise NodeFailure("the node's domain is not running")
            params = self._prepare(node, dom, target[0], target[1])
        except (NodeFailure, ImageError) as e:
            self._finish(node, migration.REFUSED, str(e))
            return
        except libvirt.libvirtError as e:
            self._finish(node, migration.FAILED, "libvirt: " + reason(e))
            return
        node = self._write(node, state=migration.RUNNING, progress=0)
        if node is None:
            return
        log.info("node %s: moving from hypervisor %s to %s", node["uuid"],
                 node["hypervisor"], m["target"])
        worker = threading.Thread(target=self._run, name=f"migrate-{node['uuid'][:8]}",
                                  args=(node, dom, target[1], params), daemon=True)
        self.workers[node["uuid"]] = worker
        worker.start()

    def _prepare(self, node, dom, target_hv, target_conn):
        """The target's disks and seed in its pool, and the migration's parameters."""
        rec = self.rec
        pool, prefix = hv_pool(target_conn, target_hv), machine_prefix(target_hv)
        cached = {url: rec.images.get(resolve_image(rec.store, url),
                                      reach_for(rec.store, rec.settings, node, url))
                  for url in images_of(node)}
        paths = {d["dev"]: d["path"] for d in
                 volumes.node_disks(pool, prefix, node, cached, rec.no_upload)}
        source_xml = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE)
        by_path = {path: dev for dev, path in disks_of(source_xml).items() if path}
        for vol in _attached(rec.store, node["uuid"]):
            name = volumes.volume_name(vol)
            found = volumes.lookup(pool, name) or pool.createXML(
                volume_xml.qcow2(name, int(vol["size"])), 0)
            for path, dev in by_path.items():
                if path.endswith("/" + name):
                    paths[dev] = found.path()
        seed_name = f"{prefix}{node['uuid']}-seed.iso"
        seed = os.path.join(rec.seed_dir, node["uuid"] + ".iso")
        for path, dev in by_path.items():
            if path.endswith("/" + seed_name) or path == seed:
                paths[dev] = volumes.in_pool(pool, seed_name, seed, rec.no_upload)
        # a target on another machine has no console log file of ours: a pty there
        local = not remote.is_remote_ssh((target_hv.get("driver_spec") or {})
                                         .get("connection_uri"))
        params = {libvirt.VIR_MIGRATE_PARAM_DEST_XML: destination_xml(source_xml, paths,
                                                                      file_console=local)}
        address = migration_address(target_hv)
        if address:
            params[libvirt.VIR_MIGRATE_PARAM_URI] = f"tcp://{address}"
        return params

    # -- the worker

    def _run(self, node, dom, target_conn, params):
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(node, dom, done), daemon=True)
        watcher.start()
        failure = None
        try:
            dom.migrate3(target_conn, params, flags())
        except libvirt.libvirtError as e:
            state = migration.REFUSED if _cannot(e) else migration.FAILED
            failure = (state, "libvirt: " + reason(e))
        except Exception as e:      # a worker must never die silently with a move "running"
            log.exception("node %s: move failed", node["uuid"])
            failure = (migration.FAILED, f"{type(e).__name__}: {e}")
        finally:
            # the last progress write before the end's, never after it
            done.set()
            watcher.join()
        if failure is None:
            self._moved(node)
        else:
            log.warning("node %s: move %s: %s", node["uuid"], *failure)
            _resume_if_paused(node, dom)
            self._finish(node, *failure)

    def _watch(self, node, dom, done):
        last = 0
        while not done.wait(PROGRESS_SECONDS):
            try:
                now = percent(dom.jobStats(0))
            except libvirt.libvirtError:
                continue
            # libvirt's total grows when the disks' copy hands over to the RAM's: the
            # share is shown as it only goes up, never back
            if now > last:
                last = now
                self._write(node, progress=now)

    def _moved(self, node):
        target = node["migration"]["target"]
        current = self._write(node, state=migration.DONE, progress=100,
                              finished_at=format_time(utcnow()), reason=None,
                              hypervisor=target)
        if current is not None:
            vols = self.rec.store.collection(VOLUMES)
            for vol in _attached(self.rec.store, node["uuid"]):
                vols.mutate(vol["uuid"], lambda r: {**r, "hypervisor": target})
        self.rec.memory.forget(node["uuid"])
        log.info("node %s: moved to hypervisor %s", node["uuid"], target)
        if self.rec.on_change is not None:
            self.rec.on_change()

    # -- after a restart

    def _recover(self, node, active):
        """A move left "running" by a daemon that died: the domain is looked for on both
        sides, and the record says where it runs. A client-driven migration ends with
        the connection of the process that drove it: the domain runs on one side (on
        the source it may be left paused: resumed here)."""
        m = node["migration"]
        source, target = active.get(node.get("hypervisor")), active.get(m["target"])
        if source is None or target is None:
            return      # asked again on the pass after both answer
        on_target = _lookup(target[1], node["uuid"])
        on_source = _lookup(source[1], node["uuid"])
        if on_target is not None and on_target.isPersistent() and (
                on_target.isActive() or on_source is None):
            if on_source is not None and not on_source.isActive():
                on_source.undefine()
            _resume_if_paused(node, on_target)
            log.info("node %s: the move to %s had finished before the daemon restarted",
                     node["uuid"], m["target"])
            self._moved(node)
            return
        if on_source is not None:
            _resume_if_paused(node, on_source)
        self._finish(node, migration.FAILED, "the compute daemon stopped during the move; "
                                             "the node stayed on its hypervisor")
        if on_target is not None and on_source is not None:
            # an incoming domain libvirt has not cleaned up yet: ours to remove
            persistent = on_target.isPersistent()
            if on_target.isActive():
                on_target.destroy()
            if persistent:
                on_target.undefine()

    # -- records

    def _finish(self, node, state, why):
        log.info("node %s: move %s: %s", node["uuid"], state, why)
        self._write(node, state=state, reason=why, finished_at=format_time(utcnow()))
        if self.rec.on_change is not None:
            self.rec.on_change()

    def _write(self, node, hypervisor=None, **fields):
        """The node's migration fields (and its hypervisor) written over whatever else
        changed meanwhile; None when the node is gone."""
        def change(record):
            out = {**record, "migration": {**(record.get("migration") or {}), **fields}}
            if hypervisor is not None:
                out["hypervisor"] = hypervisor
            return out
        try:
            return self.rec.store.collection(NODES).mutate(node["uuid"], change)
        except NotFound:        # the node was deleted during its move
            log.info("node %s is gone; its move's %s not recorded", node["uuid"], fields)
            return None


def _attached(store, node_uuid):
    return [v for v in store.collection(VOLUMES).records()
            if (v.get("node") or "").rsplit("/", 1)[-1] == node_uuid]


def _resume_if_paused(node, dom):
    """libvirt resumes the source after a failed move, but leaves it paused when the
    move's client went away after the copy and before confirming it (the target's copy
    then gone): a node that should run is resumed."""
    try:
        if dom.isActive() and dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
            log.info("node %s: resuming its domain, paused by the move", node["uuid"])
            dom.resume()
    except libvirt.libvirtError as e:
        log.warning("node %s: after the move: %s", node["uuid"], reason(e))


def _lookup(conn, uuid):
    try:
        return conn.lookupByUUIDString(uuid)
    except libvirt.libvirtError:
        return None

