"""Nodes in the compute pass, before and after their domains (docs/compute-daemon.md, steps
3, 4 and 6): placement of unplaced nodes, each placed node's port, the release of ports whose
node is gone, the nodes of a hypervisor that does not answer (ERROR), and what the pass remembers of each node between passes (`NodeMemory`): the
fingerprint of what was last made, when an ERROR is retried, and the restarts counted."""

from appliance import kinds

from . import migration, placement
from .lifecycle import built_by_daemon, unreachable_reason
from .virt import NODES, POLICIES, NodeFailure, log, write

FAILED_RETRY = 60.0         # seconds before a node in ERROR (not placement) is tried again
RESTART_WINDOW, RESTART_LIMIT = 600.0, 3


def _network_errors():
    try:
        from appliance.network.networks import NetworkError  # noqa: PLC0415
        return (NetworkError,)
    except ImportError:
        return ()


def place(store, active):
    """Each VM node without a hypervisor placed (SCHEDULED) or ERROR with the reason."""
    nodes = store.collection(NODES)
    policies = {p["uuid"]: p for p in store.collection(POLICIES).records()}
    hypervisors = [hv for hv, _ in active.values()]
    # a node being moved holds room on its target too
    placed = migration.reserved([n for n in nodes.records() if n.get("hypervisor")])
    for node in nodes.by("hypervisor", None):
        if not built_by_daemon(node):
            # a HW node is a machine of its own (the appliance itself, or one its
            # agent enrolls): nothing here to place or build, and its status is not
            # this daemon's to write
            continue
        where, reason = placement.place(node, hypervisors, placed, policies)
        if where is None:
            write(nodes, node, status="ERROR", status_reason=reason)
            continue
        written = write(nodes, node, hypervisor=where, status="SCHEDULED", status_reason=None)
        if written is not None:
            placed.append(written)
            log.info("node %s placed on hypervisor %s", node["uuid"], where)


def port(store, settings, ports, node):
    """The node's port and the network it is on; `default_network` written."""
    try:
        found = ports.allocate(store, settings, node)
    except _network_errors() as e:
        raise NodeFailure(str(e)) from None
    network = store.collection(kinds.NETWORK_NETWORKS).get(found["network"])
    if network is None:
        raise NodeFailure(f"network {found['network']} of the node's port is gone")
    wanted = ports.default_network(found, network)
    if node.get("default_network") != wanted:
        node = write(store.collection(NODES), node, default_network=wanted) or node
    return node, found, network


def hypervisor_down(store, memory, hv, why):
    """The nodes of a hypervisor that does not answer: ERROR, naming it and why. Nothing
    else changes (their domains may well run on): once it answers, each node's domain is
    looked at again (domains.plan_node) and the node is what it really is."""
    nodes = store.collection(NODES)
    text = unreachable_reason(hv, why)
    for node in nodes.by("hypervisor", hv["uuid"]):
        if not built_by_daemon(node):
            continue
        memory.converged.pop(node["uuid"], None)
        memory.failed.pop(node["uuid"], None)
        if write(nodes, node, status="ERROR", status_reason=text) is not None:
            log.warning("node %s: ERROR: %s", node["uuid"], text)


def release_orphan_ports(store, ports):
    nodes = store.collection(NODES)
    for found in store.collection(kinds.NETWORK_PORTS).records():
        if nodes.get(found["node"]) is None:
            ports.release(store, found["node"])
            log.info("released the port %s (%s) of deleted node %s", found["uuid"],
                     found["ipv4"], found["node"])


class NodeMemory:
    """What a pass remembers of each node (lost with the process, rebuilt by reading)."""

    def __init__(self, store, clock):
        self.store, self.clock = store, clock
        self.converged = {}     # node uuid -> fingerprint of what was last made for it
        self.failed = {}        # node uuid -> (revision of its ERROR, monotonic retry time)
        self.restarts = {}      # node uuid -> monotonic times it was restarted after a stop
        self.shutdowns = {}     # node uuid -> monotonic time of the ACPI shutdown
        self.was_running = {}   # node uuid -> whether its domain ran when last converged

    def forget(self, node_uuid):
        for memory in (self.converged, self.failed, self.restarts, self.shutdowns,
                       self.was_running):
            memory.pop(node_uuid, None)

    def fail(self, node, reason):
        log.warning("node %s: ERROR: %s", node["uuid"], reason)
        written = write(self.store.collection(NODES), node, status="ERROR",
                        status_reason=reason)
        revision = (written or node)["revision"]
        self.failed[node["uuid"]] = (revision, self.clock() + FAILED_RETRY)
        self.converged.pop(node["uuid"], None)

    def skip_failed(self, node):
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

    def stopped_on_its_own(self, node):
        """A domain found stopped while it should run (it shut down or crashed): started
        again, unless it did so RESTART_LIMIT times within RESTART_WINDOW; then ERROR.
        Returns True when the node was put in ERROR."""
        now = self.clock()
        times = [t for t in self.restarts.get(node["uuid"], []) if now - t < RESTART_WINDOW]
        if len(times) >= RESTART_LIMIT:
            self.fail(node, f"the domain stopped on its own {len(times) + 1} times within "
                            f"{RESTART_WINDOW:.0f} s; not restarting it again")
            return True
        times.append(now)
        self.restarts[node["uuid"]] = times
        log.warning("node %s: its domain stopped on its own; starting it again", node["uuid"])
        return False
