"""A node's libvirt domain (docs/compute-daemon.md, "A node's domain" to "Domains that stop
on their own"), in two halves:

- `plan_node(...)` is pure: the node's record, its volumes, what libvirt holds for it
  (`Held`: running or not, its live and persistent XML, whether its seed file exists) and
  what the pass remembers, in; the list of `Action`s that bring the domain in line, out.
  Every decision (power, image change, shape change, hot-plug, reboot, restart) is there,
  so it is tested without libvirt (tests/compute/test_domain_plan.py).
- `apply(...)` performs the actions in order against libvirt, the pool and the store. An
  action that finds the world moved on (an ACPI shutdown still under way, the restart
  limit reached) ends the node's turn; the next pass plans again from what it reads.

`Marks` caches each domain's mark and reports, once per hypervisor, the domains without
one (`foreign`): those are never touched."""

import os
import threading
from collections import namedtuple

from appliance import kinds
from appliance.agent.credentials import vm_credential

from . import cloudinit, domain_xml, remote, volumes
from .images import reach_for
from .images import resolve as resolve_image
from .lifecycle import waits_for_hypervisor, wants_power
from .virt import NODES, hv_pool, libvirt, log, machine_prefix, write

SHUTDOWN_GRACE = 30.0       # seconds between a power_off's ACPI shutdown and the hard stop

Action = namedtuple("Action", "verb arg", defaults=(None,))
# live_xml and persistent_xml are None when the node has no domain
Held = namedtuple("Held", "running live_xml persistent_xml seed_on_disk",
                  defaults=(False, None, None, False))


# -- the plan (pure) --------------------------------------------------------------------

def images_of(node):
    spec = node.get("disk_spec") or {}
    disks = spec.get("disks") if spec.get("kind") == "disks" else [spec]
    return [d["image"] for d in disks or [] if d.get("image")]


def root_image(node):
    images = images_of(node)
    return images[0] if images else None


def fingerprint(node, attached, running):
    """What was made for the node: its revision, its volumes, whether its domain ran."""
    return (node["revision"], tuple(sorted(v["uuid"] for v in attached)), running)


def settled(node, attached, running, remembered):
    """Nothing to read nor do: the same record, volumes and running state as last time."""
    return node["status"] == "ACTIVE" and running == wants_power(node) \
        and remembered == fingerprint(node, attached, running)


def in_place(node, prefix, attached, held, accel=None):
    """Whether the persistent definition (the one we wrote; a live change a driver
    refused is in it) already is what the node asks for: its image, shape, disks (by
    their names) and seed, no reboot left to do, and the domain type the hypervisor's
    `accel` calls for (a daemon restarted after KVM came or went redefines it; the new
    type takes effect at the domain's next start, no running guest is stopped for it)."""
    xml = held.persistent_xml
    mark = domain_xml.read_mark(xml) or {}
    if mark.get("image") != root_image(node) \
            or domain_xml.type_of(xml) != domain_xml.domain_type(accel) \
            or (node.get("reboot_requested_at") or None) != (mark.get("reboot") or None) \
            or domain_xml.shape_of(xml) != (int(node["cores"]), int(node["ram"])):
        return False
    spec = node.get("disk_spec") or {}
    count = len(spec.get("disks") or []) if spec.get("kind") == "disks" else 1
    want = {volumes.disk_name(prefix, node["uuid"], i) for i in range(count)}
    want |= {volumes.volume_name(v) for v in attached}
    have = {os.path.basename(p or "") for p in domain_xml.disks_of(xml).values()}
    # the seed: a pool volume, or the local file where the driver takes no uploads
    seeds = have & {f"{prefix}{node['uuid']}-seed.iso", node["uuid"] + ".iso"}
    return have - seeds == want and len(seeds) == 1 and held.seed_on_disk


def plan_node(node, attached, held, prefix, remembered=None, was_running=False,
              accel=None):
    """The actions that bring the node's domain in line; [] when nothing is to be done.
    `accel`: the hypervisor's ("kvm", "tcg" or None), which decides the domain type."""
    defined, running, want_on = held.live_xml is not None, held.running, wants_power(node)
    if defined and settled(node, attached, running, remembered):
        return []
    if defined and node["status"] == "ACTIVE" and running == want_on \
            and in_place(node, prefix, attached, held, accel):
        # a restarted daemon (empty memory) finds what it made before: no redefine
        return [Action("remember", running)]
    if defined and waits_for_hypervisor(node) and running == want_on \
            and in_place(node, prefix, attached, held):
        # its hypervisor answers again and the domain is as it was: nothing to rebuild
        return [Action("active", running)]
    actions = []
    if defined and running and not want_on:
        actions.append(Action("power_off"))     # ends here while the shutdown is under way
        running = False
    mark = (domain_xml.read_mark(held.live_xml) or {}) if defined else None
    root = root_image(node)
    if node["status"] != "IN_PROGRESS" and (not defined or mark.get("image") != root):
        actions.append(Action("status", "IN_PROGRESS"))
    actions += [Action("step", "images"), Action("images", images_of(node))]
    if defined and mark.get("image") != root:
        actions.append(Action("replace_root", root))
        running = False
    actions += [Action("step", "disks"), Action("disks"), Action("step", "seed"),
                Action("seed"), Action("step", "define")]
    reboot, honoured = node.get("reboot_requested_at"), (mark or {}).get("reboot")
    # a new domain has nothing to reboot: the request it was born after is honoured
    in_xml = reboot if not defined else honoured
    if defined and running:
        if accel is not None:
            # live device changes on QEMU only; elsewhere (libvirt's test driver: 11's
            # attaches live but refuses the config flag and has no detach, half a
            # change) the definition carries them to the next start
            actions.append(Action("hotplug"))
        if domain_xml.shape_of(held.live_xml) != (int(node["cores"]), int(node["ram"])):
            actions.append(Action("restart_for_shape", in_xml))
            running = False
    actions += [Action("define", in_xml), Action("step", "start")]
    if want_on and not running:
        actions.append(Action("restart" if was_running else "start"))
        running = True
        if reboot and reboot != honoured and defined:
            actions.append(Action("mark_reboot", reboot))   # a fresh boot is one
    elif want_on and reboot and reboot != honoured:
        actions += [Action("reboot", reboot), Action("mark_reboot", reboot)]
    return actions + [Action("step", "active"), Action("active", running)]


# -- the executor -----------------------------------------------------------------------

class NodeRun:
    """One node's turn in a pass: what the actions share (`rec` is the Reconciler, for
    the image cache, the pass's memory and its `step`/`reboot` hooks)."""

    def __init__(self, rec, hv, conn, node, dom, ready):
        self.rec, self.hv, self.conn, self.node, self.dom = rec, hv, conn, node, dom
        self.port, self.network, self.bridges = ready
        self.prefix = machine_prefix(hv)
        self.pool = hv_pool(conn, hv)
        self.cached, self.disks = {}, []


def converge_node(rec, hv, conn, node, dom, running, attached, ready):
    """Plan the node's domain from what libvirt holds, then apply the plan. `ready` is
    (port, network, bridges) of the node."""
    uuid = node["uuid"]
    remembered = rec.memory.converged.get(uuid)
    if dom is not None and settled(node, attached, running, remembered):
        return      # a converged node costs one lookup: its XML is not read
    held, was_running = Held(), bool(rec.memory.was_running.get(uuid))
    if dom is not None:
        # a domain in place (a restarted daemon) is known from its definition alone: the
        # live XML is read only when the plan is more than remembering it
        persistent = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        held = Held(running, persistent, persistent,
                    os.path.exists(os.path.join(rec.seed_dir, uuid + ".iso")))
    accel = rec.hypervisors.accel.get(hv["driver_spec"]["connection_uri"])
    actions = plan_node(node, attached, held, machine_prefix(hv), remembered, was_running,
                        accel)
    if dom is not None and actions != [Action("remember", running)]:
        held = held._replace(live_xml=dom.XMLDesc(0))
        actions = plan_node(node, attached, held, machine_prefix(hv), remembered, was_running,
                            accel)
    run = NodeRun(rec, hv, conn, node, dom, ready)
    apply(run, actions, attached)


def apply(run, actions, attached):
    for action in actions:
        if VERBS[action.verb](run, action.arg, attached) is False:
            return


def _remember(run, running, attached):
    run.rec.memory.converged[run.node["uuid"]] = fingerprint(run.node, attached, running)
    run.rec.memory.was_running[run.node["uuid"]] = running


def _power_off(run, _arg, _attached):
    power_off(run.rec, run.node, run.dom)
    return not run.dom.isActive()   # the ACPI shutdown is under way; a later pass finishes


def _status(run, status, _attached):
    run.node = write(run.rec.store.collection(NODES), run.node, status=status,
                     status_reason=None) or run.node


def _step(run, name, _attached):
    run.rec.step(name, run.node["uuid"])


def _images(run, urls, _attached):
    rec = run.rec
    run.cached = {url: rec.images.get(resolve_image(rec.store, url),
                                      reach_for(rec.store, rec.settings, run.node, url))
                  for url in urls}


def _replace_root(run, root, _attached):
    log.info("node %s: image changed to %s; replacing its root disk", run.node["uuid"], root)
    if run.dom.isActive():
        run.dom.destroy()
    volumes.delete(run.pool, volumes.disk_name(run.prefix, run.node["uuid"], 0))


def _disks(run, _arg, attached):
    run.disks = volumes.node_disks(run.pool, run.prefix, run.node, run.cached,
                                   run.rec.no_upload)
    # read now, not from `held`: a root replaced above stopped the domain
    current = {} if run.dom is None else {
        path: dev for dev, path in domain_xml.disks_of(run.dom.XMLDesc(0)).items()}
    paths = [(v["uuid"], volumes.volume_path(run.pool, v))
             for v in sorted(attached, key=lambda v: v["uuid"])]
    run.disks += volumes.volume_devices([p for p in paths if p[1] is not None], current,
                                        {d["dev"] for d in run.disks})


def _seed(run, _arg, _attached):
    rec, node = run.rec, run.node
    seed = os.path.join(rec.seed_dir, node["uuid"] + ".iso")
    fresh = cloudinit.write_seed(seed, cloudinit.seed_files(
        node, run.port, rec.store.collection(kinds.SECRET_SSH_KEYS).records(),
        vm_credential(rec.store, rec.settings, node)))
    seed = volumes.in_pool(run.pool, f"{run.prefix}{node['uuid']}-seed.iso", seed,
                           rec.no_upload, replace=fresh)
    run.disks.append({"path": seed, "dev": "hdc", "device": "cdrom", "format": "raw"})
    os.makedirs(rec.console_dir, exist_ok=True)


def _domain_xml(run, reboot):
    node, bridge = run.node, run.network.get("bridge")
    return domain_xml.build(
        node, run.prefix + node["uuid"],
        run.rec.hypervisors.accel.get(run.hv["driver_spec"]["connection_uri"]), run.disks,
        {"mac": run.port["mac"], "bridge": bridge}, run.bridges.get(bridge),
        None if remote.is_remote_ssh(run.hv["driver_spec"]["connection_uri"])
        else os.path.join(run.rec.console_dir, node["uuid"] + ".log"),
        image=root_image(node), reboot=reboot)


def _hotplug(run, _arg, _attached):
    hotplug(run.dom, run.dom.XMLDesc(0), run.disks)


def _restart_for_shape(run, reboot, _attached):
    log.info("node %s: cores or RAM changed; restarting it", run.node["uuid"])
    run.dom = run.conn.defineXML(_domain_xml(run, reboot))
    run.dom.destroy()


def _define(run, reboot, _attached):
    xml = _domain_xml(run, reboot)
    run.dom = run.conn.defineXML(xml)
    run.rec.marks.by_domain[(run.hv["uuid"], run.dom.UUIDString())] = domain_xml.read_mark(xml)


def _start(run, _arg, _attached):
    run.dom.create()


def _restart(run, _arg, _attached):
    if run.rec.memory.stopped_on_its_own(run.node):
        return False
    run.dom.create()


def _reboot(run, requested, _attached):
    log.info("node %s: rebooting (requested at %s)", run.node["uuid"], requested)
    run.rec.reboot(run.dom)


def _mark_reboot(run, requested, _attached):
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG
    if run.dom.isActive():
        flags |= libvirt.VIR_DOMAIN_AFFECT_LIVE
    run.dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                        domain_xml.mark_xml(run.node["uuid"], root_image(run.node), requested,
                                            bare=True),
                        domain_xml.PREFIX, domain_xml.NS, flags)


def _active(run, running, attached):
    memory = run.rec.memory
    done = write(run.rec.store.collection(NODES), run.node, status="ACTIVE",
                 status_reason=None) or run.node
    memory.failed.pop(run.node["uuid"], None)
    memory.converged[run.node["uuid"]] = fingerprint(done, attached, running)
    memory.was_running[run.node["uuid"]] = running


VERBS = {"remember": _remember, "power_off": _power_off, "status": _status, "step": _step,
         "images": _images, "replace_root": _replace_root, "disks": _disks, "seed": _seed,
         "hotplug": _hotplug, "restart_for_shape": _restart_for_shape, "define": _define,
         "start": _start, "restart": _restart, "reboot": _reboot,
         "mark_reboot": _mark_reboot, "active": _active}


# -- what the actions call --------------------------------------------------------------

def power_off(rec, node, dom):
    """An ACPI shutdown first; a hard stop once SHUTDOWN_GRACE has passed without one."""
    asked = rec.memory.shutdowns.get(node["uuid"])
    now = rec.clock()
    if asked is None:
        rec.memory.shutdowns[node["uuid"]] = now
        try:
            dom.shutdown()
        except libvirt.libvirtError:
            dom.destroy()
        if rec.on_change is not None:
            threading.Timer(SHUTDOWN_GRACE, rec.on_change).start()
    elif now - asked > SHUTDOWN_GRACE:
        log.info("node %s: no ACPI shutdown after %.0f s; stopping it hard",
                 node["uuid"], SHUTDOWN_GRACE)
        dom.destroy()
    if not dom.isActive():
        rec.memory.shutdowns.pop(node["uuid"], None)


def hotplug(dom, live_xml, disks):
    """Attach the volumes added and detach the ones removed, live and in the config
    (planned on QEMU only: plan_node)."""
    have = domain_xml.disks_of(live_xml)
    want = {d["dev"]: d for d in disks}
    flags = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG
    for dev, path in have.items():
        if dev in want and want[dev]["path"] == path:
            continue
        if dev.startswith("vd") and (dev not in want or want[dev]["path"] != path):
            _live(dom.detachDeviceFlags, domain_xml.disk_xml(
                {"path": path, "dev": dev, "format": "qcow2"}), flags)
            have[dev] = None
    for dev, disk in want.items():
        if disk.get("device", "disk") == "disk" and have.get(dev) != disk["path"]:
            _live(dom.attachDeviceFlags, domain_xml.disk_xml(disk), flags)


def _live(call, xml, flags):
    """A live device change; where the hypervisor says it has none for this device, the
    defineXML that follows still puts it in the config, for the next start."""
    try:
        call(xml, flags)
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
            raise
        log.info("live device change not supported here; it applies at the next start")


def reboot(dom):
    try:
        dom.reboot(0)
    except libvirt.libvirtError:
        # a driver without reboot: a hard reset of the same definition
        dom.destroy()
        dom.create()


def teardown(rec, hv, node_uuid, dom):
    """The node is gone (or moved): its domain, disks, seed and console log go."""
    log.info("node %s is gone: removing its domain %s and disks", node_uuid, dom.name())
    if dom.isActive():
        dom.destroy()
    try:
        dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    except libvirt.libvirtError:
        dom.undefine()      # drivers without NVRAM support (the test driver)
    rec.marks.by_domain.pop((hv["uuid"], dom.UUIDString()), None)
    for path in (os.path.join(rec.seed_dir, node_uuid + ".iso"),
                 os.path.join(rec.seed_dir, node_uuid + ".iso.sha256"),
                 os.path.join(rec.console_dir, node_uuid + ".log")):
        if os.path.exists(path):
            os.unlink(path)
    rec.memory.forget(node_uuid)


def bridges(conn):
    """{bridge name: libvirt network name} of the hypervisor's networks."""
    out = {}
    for net in conn.listAllNetworks(0):
        try:
            out[net.bridgeName()] = net.name()
        except libvirt.libvirtError:
            continue
    return out


class Marks:
    """`by_domain`: (hypervisor uuid, domain UUID) -> mark, or None for a foreign domain
    (marks never change but through us, so each domain's XML is read for it once);
    `foreign`: hypervisor uuid -> names of the foreign domains last seen."""

    def __init__(self):
        self.by_domain = {}
        self.foreign = {}

    def ours(self, hv, conn):
        """{node uuid: domain} of the domains carrying our mark; the others reported."""
        ours, foreign = {}, []
        for dom in conn.listAllDomains(0):
            key = (hv["uuid"], dom.UUIDString())
            if key not in self.by_domain:
                self.by_domain[key] = domain_xml.read_mark(dom.XMLDesc(0))
            mark = self.by_domain[key]
            if mark is None:
                foreign.append(dom.name())
            else:
                ours[mark["uuid"]] = dom
        seen = self.foreign.setdefault(hv["uuid"], set())
        for name in sorted(set(foreign) - seen):
            log.warning("hypervisor %s: domain %r has no appliance mark; leaving it alone",
                        hv.get("name") or hv["uuid"], name)
        self.foreign[hv["uuid"]] = set(foreign)
        return ours

    def forget_hypervisor(self, hv_uuid):
        for key in [k for k in self.by_domain if k[0] == hv_uuid]:
            del self.by_domain[key]

    def node_of(self, dom):
        for (_hv, dom_uuid), mark in list(self.by_domain.items()):
            if dom_uuid == dom.UUIDString() and mark:
                return mark["uuid"]
        return None
