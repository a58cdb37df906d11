"""The compute daemon's reconcile pass: libvirt's domains, volumes and networks brought in
line with the state (docs/compute-daemon.md).

`Reconciler.pass_once()` is level-triggered and idempotent: it reads every record and what
each hypervisor holds, and moves only what differs. A pass interrupted anywhere (the daemon
killed) leaves nothing the next pass cannot finish: every step looks before it creates
(pool volumes and the seed by name, domains by the node's uuid, ports by node), and a node
becomes ACTIVE only after its domain runs.

Order of a pass: node sets (capi's reconcile_sets), hypervisors (connect, discover, ACTIVE
or ERROR), placement of unplaced nodes, ports (IPAM) of placed nodes, per hypervisor its
networks (net's reconcile_networks), then every node's domain, the volumes, and what is
left over (domains, disks and ports whose node is gone). Domains without our mark are
reported once per hypervisor and counted (`foreign`), never touched.
"""

import logging
import os
import threading
import time
from html import escape  # xml.sax.saxutils would bring urllib.request and ssl along

from appliance import capabilities
from appliance.agent.credentials import vm_credential
from appliance.capability import load

from . import cloudinit, domain_xml, kvm_probe, placement
from .images import ImageCache, ImageError, reach_for
from .images import resolve as resolve_image

try:
    import libvirt
except ImportError:     # the API server imports nothing of this; only the daemon needs it
    libvirt = None

log = logging.getLogger("appliance.compute")

NODES, HYPERVISORS = "compute_nodes", "compute_hypervisors"
VOLUMES, POLICIES = "compute_volumes", "compute_placement_policies"
KINDS = (HYPERVISORS, NODES, VOLUMES, "compute_sets", POLICIES, "network_networks",
         "network_ports", "secret_ssh_keys",
         *dict.fromkeys(k for sets in capabilities.node_sets() for k in sets.watches))
NODE_REF = "/v1/compute/nodes/"
VOLUME_PREFIX = "appliance-vol-"
IMAGE_PREFIX = "appliance-image-"
FAILED_RETRY = 60.0         # seconds before a node in ERROR (not placement) is tried again
RESTART_WINDOW, RESTART_LIMIT = 600.0, 3
SHUTDOWN_GRACE = 30.0       # seconds between a power_off's ACPI shutdown and the hard stop
GB = 1024 ** 3


class NodeFailure(Exception):
    """A node cannot be brought up; the message is its status_reason."""


def _network_api():
    from appliance.network import ports  # noqa: PLC0415
    try:
        from appliance.network.reconcile import reconcile_networks  # noqa: PLC0415
    except ImportError:
        def reconcile_networks(store, conn, hypervisor):
            return None
    return ports, reconcile_networks


def _reconcile_sets():
    try:
        from appliance.compute.sets import reconcile_sets  # noqa: PLC0415
    except ImportError:
        return None
    return reconcile_sets


def _reconcile_owned_sets():
    # the node sets other capabilities own (their descriptors' node_sets): an LB of type
    # core's, a DBaaS instance's; a capability not built into this install is skipped
    steps = []
    for sets in capabilities.node_sets():
        try:
            steps.append(load(sets.reconcile))
        except ImportError:
            continue
    return steps


def _network_errors():
    try:
        from appliance.network.networks import NetworkError  # noqa: PLC0415
        return (NetworkError,)
    except ImportError:
        return ()


class Reconciler:
    kinds = KINDS

    def __init__(self, store, settings, connect=None, clock=time.monotonic, on_change=None):
        self.store = store
        self.settings = settings
        self.connect = connect or (lambda uri: libvirt.open(uri))
        self.clock = clock
        self.on_change = on_change      # called (any thread) when libvirt reports a change
        base = os.path.join(settings["state_dir"], "compute")
        self.images = ImageCache(settings.get("compute_image_dir")
                                 or os.path.join(base, "images"))
        self.seed_dir = os.path.join(base, "seeds")
        self.console_dir = os.path.join(base, "console")
        self.ports, self.reconcile_networks = _network_api()
        self.reconcile_sets = _reconcile_sets()
        self.reconcile_owned_sets = _reconcile_owned_sets()
        self.conns = {}         # hypervisor uuid -> (uri, connection)
        self.accel = {}         # connection uri -> "kvm" | "tcg" | None, detected once
        self.marks = {}         # (hypervisor uuid, domain UUID) -> mark or None (foreign)
        self.foreign = {}       # hypervisor uuid -> names of foreign domains seen
        self.converged = {}     # node uuid -> fingerprint of what was last made for it
        self.failed = {}        # node uuid -> (revision of its ERROR, monotonic retry time)
        self.restarts = {}      # node uuid -> monotonic times it was restarted after a stop
        self.shutdowns = {}     # node uuid -> monotonic time of the ACPI shutdown
        self.was_running = {}   # node uuid -> whether its domain ran when last converged
        self.no_upload = set()  # connection URIs whose driver cannot upload to a pool
        self._events_thread = None
        self._lock = threading.Lock()
        if libvirt is not None:
            # errors are raised as exceptions and logged by us; libvirt's default handler
            # would also print every expected miss (a volume looked up before it is made)
            libvirt.registerErrorHandler(lambda _ctx, _err: None, None)

    # -- the pass ----------------------------------------------------------------------

    def pass_once(self):
        with self._lock:
            for reconcile_owned in self.reconcile_owned_sets:
                reconcile_owned(self.store, self.settings)
            if self.reconcile_sets is not None:
                self.reconcile_sets(self.store, self.settings)
            active = self._hypervisors()
            self._place(active)
            nodes = self.store.collection(NODES)
            for hv_uuid, (hv, conn) in active.items():
                self._converge_hypervisor(hv, conn, nodes.by("hypervisor", hv_uuid))
            hypervisors = self.store.collection(HYPERVISORS).records()
            if len(active) == len(hypervisors):
                self._release_orphan_ports()
            else:
                # a deleted node's domain may still run on a hypervisor we cannot reach:
                # its address is held until that hypervisor is back (never given twice)
                log.debug("a hypervisor is down: ports of deleted nodes kept for now")
            self._write_capacity(active)

    def step(self, name, node_uuid):
        """A point of a node's creation; tests replace it to kill the pass right there."""

    # -- hypervisors -------------------------------------------------------------------

    def _hypervisors(self):
        coll = self.store.collection(HYPERVISORS)
        active, placed = {}, None
        for hv in coll.records():
            spec = hv.get("driver_spec") or {}
            uri = spec.get("connection_uri")
            try:
                conn = self._conn(hv["uuid"], uri)
                found = self._discover(conn, uri, spec)
            except libvirt.libvirtError as e:
                self.conns.pop(hv["uuid"], None)
                self._write(coll, hv, status="ERROR", status_reason=_reason(e))
                continue
            except NodeFailure as e:
                self._write(coll, hv, status="ERROR", status_reason=str(e))
                continue
            if hv.get("status") != "ACTIVE" or hv.get("avail_disk") is None:
                # what is free goes with ACTIVE in one write: a reader never sees an
                # ACTIVE hypervisor without its capacity (the pass's end refreshes it)
                if placed is None:
                    placed = [n for n in self.store.collection(NODES).records()
                              if n.get("hypervisor")]
                cores, ram, disk = placement.free({**hv, **found}, placed)
                found.update(avail_cores=int(cores), avail_ram=int(ram), avail_disk=int(disk))
            hv = self._write(coll, hv, status="ACTIVE", status_reason=None, **found) or hv
            active[hv["uuid"]] = (hv, conn)
        for gone in set(self.conns) - {h["uuid"] for h in coll.records()}:
            del self.conns[gone]
        return active

    def _conn(self, hv_uuid, uri):
        known = self.conns.get(hv_uuid)
        if known is not None:
            if known[0] == uri and known[1].isAlive():
                return known[1]
            log.warning("hypervisor %s: connection to %s lost; reconnecting", hv_uuid, uri)
            self.conns.pop(hv_uuid, None)
            self.marks = {k: v for k, v in self.marks.items() if k[0] != hv_uuid}
        conn = self.connect(uri)
        self._watch_events(conn)
        self.conns[hv_uuid] = (uri, conn)
        return conn

    def _discover(self, conn, uri, spec):
        _model, ram_mb, cpus = conn.getInfo()[:3]
        pool_name = pool_of(spec)
        try:
            pool = conn.storagePoolLookupByName(pool_name)
        except libvirt.libvirtError:
            raise NodeFailure(f"storage pool {pool_name!r} not found on {uri}") from None
        if not pool.isActive():
            pool.create(0)
        capacity = pool.info()[1]
        if uri not in self.accel:
            self.accel[uri], why = kvm_probe.probe_accel(conn)
            log.info("hypervisor %s: acceleration %s (%s)", uri,
                     self.accel[uri] or "none", why)
        return {"all_cores": int(cpus), "all_ram": int(ram_mb), "all_disk": int(capacity // GB),
                "accel": self.accel[uri]}

    def _write_capacity(self, active):
        coll = self.store.collection(HYPERVISORS)
        placed = [n for n in self.store.collection(NODES).records() if n.get("hypervisor")]
        for hv_uuid, (hv, _conn) in active.items():
            current = coll.get(hv_uuid)
            if current is None:
                continue
            cores, ram, disk = placement.free(current, placed)
            self._write(coll, current, avail_cores=int(cores), avail_ram=int(ram),
                        avail_disk=int(disk))

    # -- placement and ports -----------------------------------------------------------

    def _place(self, active):
        nodes = self.store.collection(NODES)
        policies = {p["uuid"]: p for p in self.store.collection(POLICIES).records()}
        hypervisors = [hv for hv, _ in active.values()]
        placed = [n for n in nodes.records() if n.get("hypervisor")]
        for node in nodes.by("hypervisor", None):
            if node.get("node_type", "VM") != "VM":
                # a HW node is a machine of its own (the appliance itself, or one its
                # agent enrolls): nothing here to place or build, and its status is not
                # this daemon's to write
                continue
            where, reason = placement.place(node, hypervisors, placed, policies)
            if where is None:
                self._write(nodes, node, status="ERROR", status_reason=reason)
                continue
            written = self._write(nodes, node, hypervisor=where, status="SCHEDULED",
                                  status_reason=None)
            if written is not None:
                placed.append(written)
                log.info("node %s placed on hypervisor %s", node["uuid"], where)

    def _port(self, node):
        """The node's port and the network it is on; `default_network` written."""
        try:
            port = self.ports.allocate(self.store, self.settings, node)
        except _network_errors() as e:
            raise NodeFailure(str(e)) from None
        network = self.store.collection("network_networks").get(port["network"])
        if network is None:
            raise NodeFailure(f"network {port['network']} of the node's port is gone")
        wanted = self.ports.default_network(port, network)
        if node.get("default_network") != wanted:
            node = self._write(self.store.collection(NODES), node,
                               default_network=wanted) or node
        return node, port, network

    def _release_orphan_ports(self):
        nodes = self.store.collection(NODES)
        for port in self.store.collection("network_ports").records():
            if nodes.get(port["node"]) is None:
                self.ports.release(self.store, port["node"])
                log.info("released the port %s (%s) of deleted node %s", port["uuid"],
                         port["ipv4"], port["node"])

    # -- one hypervisor ----------------------------------------------------------------

    def _converge_hypervisor(self, hv, conn, nodes):
        ours = self._our_domains(hv, conn)
        running = {d.UUIDString() for d in
                   conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)}
        volumes = self.store.collection(VOLUMES).records()
        attached = {}
        for vol in volumes:
            ref = vol.get("node") or ""
            if ref:
                attached.setdefault(ref.rsplit("/", 1)[-1], []).append(vol)
        ready = []
        node_coll = self.store.collection(NODES)
        for node in nodes:
            if self._skip_failed(node):
                continue
            try:
                ready.append(self._port(node))
            except NodeFailure as e:
                self._fail(node, str(e))
        # networks before domains: a domain's interface needs its network running
        self.reconcile_networks(self.store, conn, hv)
        bridges = _bridges(conn)
        self._volumes(hv, conn, volumes)
        for node, port, network in ready:
            dom = ours.pop(node["uuid"], None)
            try:
                self._converge_node(hv, conn, node, port, network, dom,
                                    node["uuid"] in running, attached.get(node["uuid"], []),
                                    bridges)
            except (NodeFailure, ImageError) as e:
                self._fail(node_coll.get(node["uuid"]) or node, str(e))
            except libvirt.libvirtError as e:
                if not conn.isAlive():
                    raise
                self._fail(node_coll.get(node["uuid"]) or node, "libvirt: " + _reason(e))
        for node_uuid, dom in ours.items():
            current = node_coll.get(node_uuid)
            if current is None or current.get("hypervisor") != hv["uuid"]:
                self._teardown(hv, conn, node_uuid, dom)
        self._sweep_pool(hv, conn, node_coll)

    def _our_domains(self, hv, conn):
        """{node uuid: domain} of the domains carrying our mark; the others reported."""
        ours, foreign = {}, []
        for dom in conn.listAllDomains(0):
            key = (hv["uuid"], dom.UUIDString())
            if key not in self.marks:
                self.marks[key] = domain_xml.read_mark(dom.XMLDesc(0))
            mark = self.marks[key]
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

    # -- one node ----------------------------------------------------------------------

    def _converge_node(self, hv, conn, node, port, network, dom, running, volumes, bridges):
        prefix = _prefix(hv)
        want_on = node.get("power_state", "on") != "off"
        images = _images_of(node)
        vol_key = tuple(sorted(v["uuid"] for v in volumes))
        fingerprint = (node["revision"], vol_key, running)
        if dom is not None and node["status"] == "ACTIVE" and running == want_on \
                and self.converged.get(node["uuid"]) == fingerprint:
            return
        if dom is not None and node["status"] == "ACTIVE" and running == want_on \
                and self._in_place(dom, node, prefix, volumes):
            # a restarted daemon (empty memory) finds what it made before: no redefine
            self.converged[node["uuid"]] = fingerprint
            self.was_running[node["uuid"]] = running
            return
        nodes = self.store.collection(NODES)
        if dom is not None and running and not want_on:
            self._power_off(node, dom)
            running = bool(dom.isActive())
            if running:
                return      # the ACPI shutdown is under way; a later pass finishes it
        mark = None
        if dom is not None:
            mark = domain_xml.read_mark(dom.XMLDesc(0)) or {}
        pool = conn.storagePoolLookupByName(pool_of(hv.get("driver_spec") or {}))
        if node["status"] not in ("IN_PROGRESS",) and (dom is None or mark.get("image")
                                                       != (images[0] if images else None)):
            node = self._write(nodes, node, status="IN_PROGRESS", status_reason=None) or node
        self.step("images", node["uuid"])
        cached = {url: self.images.get(resolve_image(self.store, url),
                                       reach_for(self.store, self.settings, node, url))
                  for url in images}
        root_url = images[0] if images else None
        if dom is not None and mark.get("image") != root_url:
            log.info("node %s: image changed to %s; replacing its root disk", node["uuid"],
                     root_url)
            if dom.isActive():
                dom.destroy()
            _delete_volume(pool, _disk_name(prefix, node["uuid"], 0))
            running = False
        self.step("disks", node["uuid"])
        disks = self._disks(pool, prefix, node, cached)
        # a volume keeps the device it has, so that detaching one never renames the others
        current = {} if dom is None else {
            path: dev for dev, path in domain_xml.disks_of(dom.XMLDesc(0)).items()}
        taken = {d["dev"] for d in disks}
        placed = []
        for vol in sorted(volumes, key=lambda v: v["uuid"]):
            path = self._volume_path(pool, vol)
            if path is None:
                continue
            dev = current.get(path)
            if dev is None or dev in taken:
                dev = next(_dev(i) for i in range(26) if _dev(i) not in taken
                           and _dev(i) not in current.values())
            taken.add(dev)
            placed.append({"path": path, "dev": dev, "format": "qcow2",
                           "serial": vol["uuid"][:20]})
        disks += placed
        self.step("seed", node["uuid"])
        seed = os.path.join(self.seed_dir, node["uuid"] + ".iso")
        fresh = cloudinit.write_seed(seed, cloudinit.seed_files(
            node, port, self.store.collection("secret_ssh_keys").records(),
            vm_credential(self.store, self.settings, node)))
        seed = self._in_pool(pool, f"{prefix}{node['uuid']}-seed.iso", seed, replace=fresh)
        disks.append({"path": seed, "dev": "hdc", "device": "cdrom", "format": "raw"})
        os.makedirs(self.console_dir, exist_ok=True)
        reboot = node.get("reboot_requested_at")
        honoured = (mark or {}).get("reboot")
        xml = domain_xml.build(
            node, prefix + node["uuid"], self.accel.get(hv["driver_spec"]["connection_uri"]),
            disks, {"mac": port["mac"], "bridge": network.get("bridge")},
            bridges.get(network.get("bridge")),
            os.path.join(self.console_dir, node["uuid"] + ".log"), image=root_url,
            # a new domain has nothing to reboot: the request it was born after is honoured
            reboot=reboot if dom is None else honoured)
        self.step("define", node["uuid"])
        if dom is not None and running:
            live = dom.XMLDesc(0)
            self._hotplug(dom, live, disks)
            if domain_xml.shape_of(live) != (int(node["cores"]), int(node["ram"])):
                log.info("node %s: cores or RAM changed; restarting it", node["uuid"])
                dom = conn.defineXML(xml)
                dom.destroy()
                running = False
        dom = conn.defineXML(xml)
        self.marks[(hv["uuid"], dom.UUIDString())] = domain_xml.read_mark(xml)
        self.step("start", node["uuid"])
        if want_on and not running:
            if self.was_running.get(node["uuid"]) and self._stopped_on_its_own(node):
                return
            dom.create()
            running = True
            if reboot and reboot != honoured and dom is not None and mark is not None:
                self._mark_reboot(dom, node, root_url, reboot)     # a fresh boot is one
        elif want_on and reboot and reboot != honoured and dom is not None:
            log.info("node %s: rebooting (requested at %s)", node["uuid"], reboot)
            self.reboot(dom)
            self._mark_reboot(dom, node, root_url, reboot)
        self.step("active", node["uuid"])
        done = self._write(nodes, node, status="ACTIVE", status_reason=None) or node
        self.failed.pop(node["uuid"], None)
        self.converged[node["uuid"]] = (done["revision"], vol_key, running)
        self.was_running[node["uuid"]] = running

    def _in_place(self, dom, node, prefix, volumes):
        """Whether the domain already is what the node asks for: its image, shape, disks
        (by their names) and seed, and no reboot left to do. One read of its persistent
        XML (the definition we wrote; a live change that a driver refused is in it)."""
        xml = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        mark = domain_xml.read_mark(xml) or {}
        images = _images_of(node)
        if mark.get("image") != (images[0] if images else None) \
                or (node.get("reboot_requested_at") or None) != (mark.get("reboot") or None) \
                or domain_xml.shape_of(xml) != (int(node["cores"]), int(node["ram"])):
            return False
        spec = node.get("disk_spec") or {}
        count = len(spec.get("disks") or []) if spec.get("kind") == "disks" else 1
        want = {_disk_name(prefix, node["uuid"], i) for i in range(count)}
        want |= {VOLUME_PREFIX + v["uuid"] + ".qcow2" for v in volumes}
        have = {os.path.basename(p or "") for p in domain_xml.disks_of(xml).values()}
        # the seed: a pool volume, or the local file where the driver takes no uploads
        seeds = have & {f"{prefix}{node['uuid']}-seed.iso", node["uuid"] + ".iso"}
        return have - seeds == want and len(seeds) == 1 and os.path.exists(
            os.path.join(self.seed_dir, node["uuid"] + ".iso"))

    def _in_pool(self, pool, name, path, replace=False):
        """The path, on the hypervisor, of a copy of the local file `path` in the storage
        pool (uploaded once; again when `replace`). The pool is where the hypervisor's
        QEMU may read (the state directory is 0700, and a remote hypervisor cannot see it
        at all). A completed upload is marked by a companion volume `<name>.done`, so one
        cut short by a kill is never used. Drivers without uploads (the test driver) get
        the local path."""
        conn = pool.connect()
        if conn.getURI() in self.no_upload:
            return path
        done = name + ".done"
        vol = _lookup_volume(pool, name)
        if vol is not None and not replace and _lookup_volume(pool, done) is not None:
            return vol.path()
        _delete_volume(pool, done)
        if vol is not None:
            vol.delete(0)
        size = os.path.getsize(path)
        vol = pool.createXML(f"<volume><name>{escape(name)}</name><capacity unit='B'>{size}"
                             "</capacity><target><format type='raw'/></target></volume>", 0)
        stream = conn.newStream(0)
        try:
            vol.upload(stream, 0, size, 0)
        except libvirt.libvirtError as e:
            vol.delete(0)
            if e.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
                raise
            log.info("%s takes no uploads: its domains use local files", conn.getURI())
            self.no_upload.add(conn.getURI())
            return path
        with open(path, "rb") as f:
            stream.sendAll(lambda _stream, nbytes, handle: handle.read(nbytes), f)
        stream.finish()
        pool.createXML(f"<volume><name>{escape(done)}</name><capacity unit='B'>0"
                       "</capacity><target><format type='raw'/></target></volume>", 0)
        return vol.path()

    def _disks(self, pool, prefix, node, cached):
        """The node's disk_spec disks, each a pool volume (an overlay of its image, or
        blank), created when missing; [{"path", "dev", "format"}]."""
        spec = node.get("disk_spec") or {}
        specs = spec.get("disks") if spec.get("kind") == "disks" else [spec]
        disks = []
        for index, disk in enumerate(specs or []):
            name = _disk_name(prefix, node["uuid"], index)
            image = cached.get(disk.get("image")) if disk.get("image") else None
            vol = _lookup_volume(pool, name)
            if vol is None:
                backing = None if image is None else self._in_pool(
                    pool, IMAGE_PREFIX + image["sha256"][:32] + "." + image["format"],
                    image["path"])
                vol = pool.createXML(_volume_xml(name, int(disk.get("size") or 10), image,
                                                 backing), 0)
            disks.append({"path": vol.path(), "dev": _dev(index), "format": "qcow2"})
        if not disks:
            raise NodeFailure("disk_spec has no disk to boot from")
        return disks

    def _hotplug(self, dom, live_xml, disks):
        """Attach the volumes added and detach the ones removed, live and in the config."""
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

    def _power_off(self, node, dom):
        asked = self.shutdowns.get(node["uuid"])
        now = self.clock()
        if asked is None:
            self.shutdowns[node["uuid"]] = now
            try:
                dom.shutdown()
            except libvirt.libvirtError:
                dom.destroy()
            if self.on_change is not None:
                threading.Timer(SHUTDOWN_GRACE, self.on_change).start()
        elif now - asked > SHUTDOWN_GRACE:
            log.info("node %s: no ACPI shutdown after %.0f s; stopping it hard",
                     node["uuid"], SHUTDOWN_GRACE)
            dom.destroy()
        if not dom.isActive():
            self.shutdowns.pop(node["uuid"], None)

    def _stopped_on_its_own(self, node):
        """A domain found stopped while it should run (it shut down or crashed): started
        again, unless it did so RESTART_LIMIT times within RESTART_WINDOW; then ERROR.
        Returns True when the node was put in ERROR."""
        now = self.clock()
        times = [t for t in self.restarts.get(node["uuid"], []) if now - t < RESTART_WINDOW]
        if len(times) >= RESTART_LIMIT:
            self._fail(node, f"the domain stopped on its own {len(times) + 1} times within "
                             f"{RESTART_WINDOW:.0f} s; not restarting it again")
            return True
        times.append(now)
        self.restarts[node["uuid"]] = times
        log.warning("node %s: its domain stopped on its own; starting it again", node["uuid"])
        return False

    def reboot(self, dom):
        try:
            dom.reboot(0)
        except libvirt.libvirtError:
            # a driver without reboot: a hard reset of the same definition
            dom.destroy()
            dom.create()

    def _mark_reboot(self, dom, node, image, reboot):
        flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG
        if dom.isActive():
            flags |= libvirt.VIR_DOMAIN_AFFECT_LIVE
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                        domain_xml.mark_xml(node["uuid"], image, reboot, bare=True),
                        domain_xml.PREFIX, domain_xml.NS, flags)

    # -- volumes -----------------------------------------------------------------------

    def _volumes(self, hv, conn, volumes):
        """Every volume record that belongs on this hypervisor gets its pool volume:
        an attached one where its node is, a loose one on the first ACTIVE hypervisor."""
        coll = self.store.collection(VOLUMES)
        nodes = self.store.collection(NODES)
        pool = conn.storagePoolLookupByName(pool_of(hv.get("driver_spec") or {}))
        first = min(self.conns) if self.conns else hv["uuid"]
        for vol in volumes:
            node = nodes.get((vol.get("node") or "").rsplit("/", 1)[-1]) if vol.get("node") \
                else None
            home = vol.get("hypervisor") or (node or {}).get("hypervisor") or \
                (first if not vol.get("node") else None)
            if home != hv["uuid"]:
                if node is not None and vol.get("hypervisor") and node.get("hypervisor") \
                        and node["hypervisor"] != vol["hypervisor"]:
                    self._write(coll, vol, status="ERROR", status_reason=(
                        f"the volume is on hypervisor {vol['hypervisor']}, its node on "
                        f"{node['hypervisor']}"))
                continue
            name = VOLUME_PREFIX + vol["uuid"] + ".qcow2"
            found = _lookup_volume(pool, name)
            if found is None:
                pool.createXML(_volume_xml(name, int(vol["size"]), None), 0)
            elif found.info()[1] < int(vol["size"]) * GB:
                found.resize(int(vol["size"]) * GB, 0)
            self._write(coll, vol, hypervisor=hv["uuid"], status="ACTIVE", status_reason=None)

    def _volume_path(self, pool, vol):
        found = _lookup_volume(pool, VOLUME_PREFIX + vol["uuid"] + ".qcow2")
        return None if found is None else found.path()

    # -- teardown ----------------------------------------------------------------------

    def _teardown(self, hv, conn, node_uuid, dom):
        """The node is gone (or moved): its domain, disks, seed and console log go."""
        log.info("node %s is gone: removing its domain %s and disks", node_uuid, dom.name())
        if dom.isActive():
            dom.destroy()
        try:
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
        except libvirt.libvirtError:
            dom.undefine()      # drivers without NVRAM support (the test driver)
        self.marks.pop((hv["uuid"], dom.UUIDString()), None)
        for path in (os.path.join(self.seed_dir, node_uuid + ".iso"),
                     os.path.join(self.seed_dir, node_uuid + ".iso.sha256"),
                     os.path.join(self.console_dir, node_uuid + ".log")):
            if os.path.exists(path):
                os.unlink(path)
        for key in (self.converged, self.failed, self.restarts, self.shutdowns,
                    self.was_running):
            key.pop(node_uuid, None)

    def _sweep_pool(self, hv, conn, nodes):
        """Pool volumes named as ours whose node or volume record is gone (a delete, or a
        creation killed half-way) are deleted; nothing else in the pool is touched."""
        prefix = _prefix(hv)
        pool = conn.storagePoolLookupByName(pool_of(hv.get("driver_spec") or {}))
        volumes = self.store.collection(VOLUMES)
        for name in pool.listVolumes():
            owner = _owner(name, prefix)
            if owner is None:
                continue
            kind, uuid = owner
            record = (volumes if kind == "volume" else nodes).get(uuid)
            if record is not None and (kind == "volume" or record.get("hypervisor") == hv["uuid"]):
                continue
            if kind == "volume" and record is None and self._attached_somewhere(conn, name):
                continue
            _delete_volume(pool, name)
            log.info("deleted pool volume %s: its %s %s is gone", name, kind, uuid)

    def _attached_somewhere(self, conn, name):
        for dom in conn.listAllDomains(0):
            if any(p and p.endswith("/" + name) for p in
                   domain_xml.disks_of(dom.XMLDesc(0)).values()):
                return True
        return False

    # -- status writes -----------------------------------------------------------------

    def _write(self, coll, record, **changes):
        """Compare-and-set of the fields that differ; the new record, or None when
        nothing differed or the record moved on (its change brings another pass)."""
        diff = {k: v for k, v in changes.items() if record.get(k) != v}
        if not diff:
            return None
        done = coll.update_many({record["uuid"]: (record["revision"], diff)})
        return done.get(record["uuid"])

    def _fail(self, node, reason):
        log.warning("node %s: ERROR: %s", node["uuid"], reason)
        written = self._write(self.store.collection(NODES), node, status="ERROR",
                              status_reason=reason)
        revision = (written or node)["revision"]
        self.failed[node["uuid"]] = (revision, self.clock() + FAILED_RETRY)
        self.converged.pop(node["uuid"], None)

    def _skip_failed(self, node):
        """A node in ERROR is tried again after FAILED_RETRY, or at once when its record
        changes (a PUT), which also forgets its count of restarts."""
        failed = self.failed.get(node["uuid"])
        if failed is None:
            # an ERROR from before this process: try once, as after any restart
            return False
        revision, retry_at = failed
        if revision != node["revision"]:
            self.failed.pop(node["uuid"], None)
            self.restarts.pop(node["uuid"], None)
            return False
        return node["status"] == "ERROR" and self.clock() < retry_at

    # -- libvirt events ----------------------------------------------------------------

    def start_events(self):
        """Run libvirt's default event loop in a thread, so that lifecycle events of
        every connection opened afterwards call `on_change`. Call before any connect."""
        if self._events_thread is not None or libvirt is None:
            return
        libvirt.virEventRegisterDefaultImpl()

        def loop():
            while True:
                libvirt.virEventRunDefaultImpl()
        self._events_thread = threading.Thread(target=loop, daemon=True,
                                               name="libvirt-events")
        self._events_thread.start()

    def _watch_events(self, conn):
        if self._events_thread is None or self.on_change is None:
            return

        def lifecycle(_conn, dom, event, detail, _opaque):
            log.debug("domain %s: lifecycle event %d/%d", dom.name(), event, detail)
            self.converged.pop(self._node_of(dom), None)
            self.on_change()

        def closed(_conn, reason, _opaque):
            log.warning("a libvirt connection closed (reason %d)", reason)
            self.on_change()
        try:
            conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                        lifecycle, None)
            conn.registerCloseCallback(closed, None)
        except libvirt.libvirtError as e:
            log.warning("no libvirt events on this connection (%s): periodic passes only",
                        _reason(e))

    def _node_of(self, dom):
        for (_hv, dom_uuid), mark in list(self.marks.items()):
            if dom_uuid == dom.UUIDString() and mark:
                return mark["uuid"]
        return None


# -- helpers ---------------------------------------------------------------------------

def detect_accel(conn):
    """'kvm' when a KVM guest really runs on this hypervisor, 'tcg' when only QEMU's
    emulator is offered or KVM does not really work, None when the driver is not QEMU
    (test:///). The probe and why it leaves nothing behind: appliance/compute/kvm_probe.py."""
    return kvm_probe.probe_accel(conn)[0]


def _reason(error):
    return str(error.get_error_message() or error) if hasattr(error, "get_error_message") \
        else str(error)


def pool_of(spec):
    """The storage pool's name: a plain name, or the first (only) entry of an
    exordos_local_hyper's list [{name, tier, ephemeral}] (docs/compute.md)."""
    pool = spec.get("storage_pool") or "default"
    return pool[0]["name"] if isinstance(pool, list) else pool


def _prefix(hv):
    return (hv.get("driver_spec") or {}).get("machine_prefix") or "vm-"


def _images_of(node):
    spec = node.get("disk_spec") or {}
    disks = spec.get("disks") if spec.get("kind") == "disks" else [spec]
    return [d["image"] for d in disks or [] if d.get("image")]


def _disk_name(prefix, node_uuid, index):
    return f"{prefix}{node_uuid}-disk{index}.qcow2"


def _owner(name, prefix):
    """("node"|"volume", uuid) of a pool volume named by us, else None."""
    if name.startswith(VOLUME_PREFIX) and name.endswith(".qcow2"):
        return "volume", name[len(VOLUME_PREFIX):-len(".qcow2")]
    if name.startswith(prefix) and (name.endswith(".qcow2") or name.endswith("-seed.iso")
                                    or name.endswith("-seed.iso.done")):
        uuid = name[len(prefix):len(prefix) + 36]
        if len(uuid) == 36 and name[len(prefix) + 36] == "-":
            return "node", uuid
    return None


def _dev(index):
    return "vd" + "abcdefghijklmnopqrstuvwxyz"[index]


def _volume_xml(name, size_gb, image=None, backing_path=None):
    """A qcow2 volume of `size_gb`, an overlay of `image` (a cache record) at
    `backing_path` when given; never smaller than the image, or the guest would see a
    truncated disk."""
    size = size_gb * GB
    backing = ""
    if image is not None:
        size = max(size, int(image.get("virtual_size") or 0))
        backing = (f"<backingStore><path>{escape(backing_path)}</path>"
                   f"<format type='{image['format']}'/></backingStore>")
    return (f"<volume><name>{escape(name)}</name><capacity unit='B'>{size}</capacity>"
            f"<target><format type='qcow2'/></target>{backing}</volume>")


def _lookup_volume(pool, name):
    try:
        return pool.storageVolLookupByName(name)
    except libvirt.libvirtError:
        return None


def _delete_volume(pool, name):
    vol = _lookup_volume(pool, name)
    if vol is not None:
        vol.delete(0)


def _live(call, xml, flags):
    """A live device change; where the driver has none (the test driver), the
    defineXML that follows still puts it in the config, for the next start."""
    try:
        call(xml, flags)
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
            raise
        log.info("live device change not supported here; it applies at the next start")


def _bridges(conn):
    """{bridge name: libvirt network name} of the hypervisor's networks."""
    out = {}
    for net in conn.listAllNetworks(0):
        try:
            out[net.bridgeName()] = net.name()
        except libvirt.libvirtError:
            continue
    return out


