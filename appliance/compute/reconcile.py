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

This module is the orchestrator only, so that a pass reads top to bottom in one screen; each
step lives in a module of its own: hypervisors.py (connect, discover, ACTIVE/ERROR), nodes.py
(placement, ports, the memory of a node between passes), domains.py (the pure `plan_node`
and the executor that applies it), volumes.py (pool volumes; their XML in volume_xml.py) and
events.py (libvirt's callbacks). virt.py holds what they share.
"""

import os
import threading
import time

from appliance import capabilities, kinds
from appliance.capability import load

from . import domains, migration, nodes, remote, volumes
from .console import console_dir
from .domains import Marks
from .events import Events
from .hypervisors import Hypervisors, write_capacity
from .images import ImageCache, ImageError
from .migrate import Migrations
from .nodes import NodeMemory
from .remote_console import RemoteConsoles
from .virt import (HYPERVISORS, NODES, POLICIES, VOLUMES, NodeFailure, libvirt, log,
                   machine_prefix, quiet_errors, reason)

KINDS = (HYPERVISORS, NODES, VOLUMES, "compute_sets", POLICIES, kinds.NETWORK_NETWORKS,
         kinds.NETWORK_PORTS, kinds.SECRET_SSH_KEYS,
         *dict.fromkeys(k for sets in capabilities.node_sets() for k in sets.watches))


def _network_api():
    from appliance.network import ports  # noqa: PLC0415
    try:
        from appliance.network.reconcile import reconcile_networks  # noqa: PLC0415
    except ImportError:
        def reconcile_networks(store, conn, hypervisor, arriving=()):
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


class Reconciler:
    """One pass over every hypervisor; the parts it runs are in hypervisors.py, nodes.py,
    domains.py, volumes.py and events.py. Its attributes are what those parts share."""
    kinds = KINDS

    def __init__(self, store, settings, connect=None, clock=time.monotonic, on_change=None):
        self.store, self.settings, self.clock = store, settings, clock
        self.connect = connect or (lambda uri: libvirt.open(uri))
        self.on_change = on_change      # called (any thread) when libvirt reports a change
        base = os.path.join(settings["state_dir"], "compute")
        self.images = ImageCache(settings.get("compute_image_dir")
                                 or os.path.join(base, "images"))
        self.seed_dir = os.path.join(base, "seeds")
        self.console_dir = console_dir(settings)
        self.ports, self.reconcile_networks = _network_api()
        self.reconcile_sets = _reconcile_sets()
        self.reconcile_owned_sets = _reconcile_owned_sets()
        self.memory = NodeMemory(store, lambda: self.clock())
        self.converged = self.memory.converged
        self.marks = Marks()
        self.foreign = self.marks.foreign
        self.events = Events(on_change, lambda dom: self.converged.pop(
            self.marks.node_of(dom), None))
        # remote guests' consoles copied to console_dir (remote_console.py)
        self.consoles = RemoteConsoles(self.console_dir,
                                       lambda: self.events.thread is not None)
        self.hypervisors = Hypervisors(store, lambda uri: self.connect(uri), self.events.watch,
                                       self._forget_hypervisor,
                                       ssh_dir=os.path.join(base, "ssh"))
        self.conns = self.hypervisors.conns     # hypervisor uuid -> (what was opened, connection)
        self.no_upload = set()  # connection URIs whose driver cannot upload to a pool
        self.migrations = Migrations(self)  # moves of nodes between hypervisors
        self._lock = threading.Lock()
        quiet_errors()

    def pass_once(self):
        with self._lock:
            for reconcile_owned in self.reconcile_owned_sets:
                reconcile_owned(self.store, self.settings)
            if self.reconcile_sets is not None:
                self.reconcile_sets(self.store, self.settings)
            active = self.hypervisors.refresh()
            self._nodes_of_down_hypervisors()
            nodes.place(self.store, active)
            by_hv = self.store.collection(NODES)
            for hv_uuid, (hv, conn) in list(active.items()):
                try:
                    _converge_hypervisor(self, hv, conn, by_hv.by("hypervisor", hv_uuid))
                except libvirt.libvirtError as e:
                    if conn.isAlive():
                        raise
                    # it went away mid-pass: as if it had not answered, and the others go on
                    del active[hv_uuid]
                    self.hypervisors.unreachable(hv, reason(e))
                    self._nodes_of_down_hypervisors()
            # after the hypervisors: a target already runs the moved node's network
            self.migrations.step(active)
            if len(active) == len(self.store.collection(HYPERVISORS).records()):
                nodes.release_orphan_ports(self.store, self.ports)
            else:
                # a deleted node's domain may still run on a hypervisor we cannot reach:
                # its address is held until that hypervisor is back (never given twice)
                log.debug("a hypervisor is down: ports of deleted nodes kept for now")
            write_capacity(self.store, active)

    def _forget_hypervisor(self, hv_uuid):
        self.marks.forget_hypervisor(hv_uuid)
        self.consoles.forget_hypervisor(hv_uuid)

    def _nodes_of_down_hypervisors(self):
        hv_coll = self.store.collection(HYPERVISORS)
        for hv_uuid, why in self.hypervisors.down.items():
            hv = hv_coll.get(hv_uuid)
            if hv is not None:
                nodes.hypervisor_down(self.store, self.memory, hv, why)

    def step(self, name, node_uuid):
        """A point of a node's creation; tests replace it to kill the pass right there."""

    def reboot(self, dom):
        domains.reboot(dom)

    def start_events(self):     # libvirt's event loop: call before any connect (events.py)
        self.events.start()


def _converge_hypervisor(rec, hv, conn, hv_nodes):
    """Ports, networks, volumes, then every node's domain; then what is left over."""
    ours = rec.marks.ours(hv, conn)
    running = {d.UUIDString() for d in
               conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)}
    all_volumes = rec.store.collection(VOLUMES).records()
    attached = {}
    for vol in all_volumes:
        if vol.get("node"):
            attached.setdefault(vol["node"].rsplit("/", 1)[-1], []).append(vol)
    ready = []
    for node in hv_nodes:
        if rec.memory.skip_failed(node) or moving(rec, node):
            continue
        try:
            ready.append(nodes.port(rec.store, rec.settings, rec.ports, node))
        except NodeFailure as e:
            rec.memory.fail(node, str(e))
    # networks before domains: a domain's interface needs its network running
    arriving = [n for n in rec.store.collection(NODES).records()
                if migration.target_of(n) == hv["uuid"]]
    rec.reconcile_networks(rec.store, conn, hv, arriving)
    bridges = domains.bridges(conn)
    volumes.make_volumes(rec.store, hv, conn, all_volumes, rec.hypervisors.first(hv["uuid"]))
    for node, port, network in ready:
        _converge_node(rec, hv, conn, node, ours.pop(node["uuid"], None),
                       node["uuid"] in running, attached.get(node["uuid"], []),
                       (port, network, bridges))
    node_coll = rec.store.collection(NODES)
    for node_uuid, dom in ours.items():
        current = node_coll.get(node_uuid)
        if current is None or (current.get("hypervisor") != hv["uuid"]
                               and migration.target_of(current) != hv["uuid"]):
            domains.teardown(rec, hv, node_uuid, dom)
    volumes.sweep_pool(rec.store, hv, conn, machine_prefix(hv))
    if remote.is_remote_ssh(hv["driver_spec"]["connection_uri"]):
        # its guests' consoles are ptys there (domains.py): copied here to be read; not
        # while a node moves (its domain may be the move's incoming, paused copy)
        settled = {}
        for node_uuid, dom in rec.marks.ours(hv, conn).items():
            node = node_coll.get(node_uuid)
            if node is not None and node.get("hypervisor") == hv["uuid"] \
                    and not moving(rec, node):
                settled[node_uuid] = dom
        rec.consoles.follow(hv, conn, settled)


def moving(rec, node):
    """A node whose domain libvirt is moving now: the pass leaves it to the move."""
    return rec.migrations.busy(node["uuid"]) or \
        (node.get("migration") or {}).get("state") == migration.RUNNING


def _converge_node(rec, hv, conn, node, dom, running, attached, ready):
    """One node's domain; what fails puts the node (not the pass) in ERROR."""
    try:
        domains.converge_node(rec, hv, conn, node, dom, running, attached, ready)
    except (NodeFailure, ImageError) as e:
        rec.memory.fail(rec.store.collection(NODES).get(node["uuid"]) or node, str(e))
    except libvirt.libvirtError as e:
        if not conn.isAlive():
            raise
        rec.memory.fail(rec.store.collection(NODES).get(node["uuid"]) or node,
                        "libvirt: " + reason(e))
