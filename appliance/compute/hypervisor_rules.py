"""The checks of a hypervisor's `driver_spec` before the API writes it (docs/compute.md): the
defaults filled in (drivers.py, which the daemon reads with the same defaults), and an
exordos_local_hyper's `node`: the admin project's HW node this libvirt runs on, at most one
hypervisor per node; a qemu+ssh hypervisor's pinned host key (remote.py). Raises the API's 4xx errors; resources.py calls it under
HYPERVISOR_NODE_LOCK, so that two registrations of one node at once cannot both pass.
"""

from appliance.api.errors import BadRequest, Conflict, Forbidden
from appliance.kinds import ADMIN_PROJECT, COMPUTE_HYPERVISORS, COMPUTE_NODES
from appliance.tenancy import nodes as node_rules
from appliance.tenancy import underlay

from . import remote
from .drivers import LOCAL_HYPER, with_defaults
from .lifecycle import REDO

HYPERVISOR_NODE_LOCK = "hypervisor-nodes"


def new_hypervisor(store, call, record):
    """A hypervisor as created: its spec checked, IN_PROGRESS until the daemon measures it
    (the avail_* a client sent are replaced by that measure)."""
    record["driver_spec"] = checked_spec(store, call, record["driver_spec"], record["uuid"])
    record["connection_uri"] = record["driver_spec"]["connection_uri"]
    record.update(REDO)
    record["avail_cores"] = record["avail_ram"] = None
    return record


def hypervisor_changes(store, call, current, changes):
    """A PUT: a new spec checked; IN_PROGRESS again."""
    if "driver_spec" in changes:
        changes["driver_spec"] = checked_spec(store, call, changes["driver_spec"],
                                              current["uuid"])
        changes["connection_uri"] = changes["driver_spec"]["connection_uri"]
    changes.update(REDO)
    return changes


def checked_spec(store, call, spec, own_uuid):
    """The spec with its defaults; a local_hyper's `node` checked: it names the
    machine this libvirt runs on, so it must be a HW node of the admin project (the
    tenant rule of appliance/tenancy/nodes.py: a project's machine never hosts the
    platform's VMs), at most one hypervisor per node (409, as the reference)."""
    spec = with_defaults(spec)
    try:
        spec = remote.check_spec(spec)
    except remote.SpecError as e:
        raise BadRequest(str(e)) from None
    check_underlay(store, call, spec, own_uuid)
    if spec["kind"] != LOCAL_HYPER:
        if "node" in spec:
            raise BadRequest(f"driver_spec.node: only for kind {LOCAL_HYPER}")
        if not isinstance(spec["storage_pool"], str):
            raise BadRequest("driver_spec.storage_pool: a pool name for kind libvirt")
        return spec
    if "node" not in spec:
        raise BadRequest(f"driver_spec.node: required for kind {LOCAL_HYPER}: the "
                         "uuid of the HW node this libvirt runs on")
    spec["node"], = node_rules.check_nodes(
        store, call.principal, ADMIN_PROJECT, "node", [spec["node"]],
        lambda i: "driver_spec.node")
    if store.collection(COMPUTE_NODES).get(spec["node"]).get("node_type") != "HW":
        raise BadRequest(f"driver_spec.node: node {spec['node']} is a VM: a "
                         f"{LOCAL_HYPER} runs on a HW node")
    check_one_per_node(store, spec["node"], own_uuid)
    return spec


def check_underlay(store, call, spec, own_uuid):
    """The underlay and migration addresses by the tenant rule
    (appliance/tenancy/underlay.py), and one hypervisor per underlay address (409): two
    would take each other's tunnels."""
    for field in ("migration_address", "underlay_address"):
        if spec.get(field) is None:
            spec.pop(field, None)
            continue
        refused = underlay.refusal(store, call.principal, spec[field],
                                   f"driver_spec.{field}")
        if refused:
            status, message = refused
            raise (Forbidden if status == 403 else BadRequest)(message)
    address = spec.get("underlay_address")
    if address is None:
        return
    other = next((h for h in store.collection(COMPUTE_HYPERVISORS).records()
                  if h["uuid"] != own_uuid
                  and (h.get("driver_spec") or {}).get("underlay_address") == address), None)
    if other is not None:
        raise Conflict(f"driver_spec.underlay_address: hypervisor {other['uuid']} already "
                       f"has {address}")


def check_one_per_node(store, node_uuid, own_uuid):
    other = next((h for h in store.collection(COMPUTE_HYPERVISORS).records()
                  if h["uuid"] != own_uuid and (h.get("driver_spec") or {}).get("kind")
                  == LOCAL_HYPER and h["driver_spec"].get("node") == node_uuid), None)
    if other is not None:
        raise Conflict(f"driver_spec.node: hypervisor {other['uuid']} already runs on "
                       f"node {node_uuid}: update that one")
