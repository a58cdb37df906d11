"""Where an LB runs, by its `type` (docs/lb.md, "Placement"): read-only over the store, no
other I/O, so the API (ipsv4, port checks), the producer and the status step share it.

- `core_agent`: the appliance's own node, the node of the agent that first boot enrolled
  under the name "appliance" (appliance/firstboot/register.py, enroll_self), for LBs of
  the admin project only (appliance/tenancy/nodes.py);
- `external_node`: that node;
- `core`: the members of the LB's own node set, whose uuid is the LB's (the reference's
  `lbaas-<name>` set, made by appliance/lb/reconcile.py).
"""

from appliance.kinds import ADMIN_PROJECT, COMPUTE_NODES, COMPUTE_SETS
from appliance.tenancy import appliance_node

NODES, SETS = COMPUTE_NODES, COMPUTE_SETS


def set_name(lb):
    return f"lbaas-{lb.get('name') or lb['uuid'][:8]}"


def placed(store, lb, own=None):
    """(nodes, problem): the node records `lb` runs on, in a stable order, and when there
    are none, (status, reason) of why. `own`: the appliance's node when already known
    (a caller placing many LBs looks it up once)."""
    kind = lb["type"]["kind"]
    if kind == "core_agent":
        if lb.get("project_id") != ADMIN_PROJECT:
            # made before the rule (docs/security.md): a project's LB stays off the
            # appliance's own node until its type is changed
            return [], ("ERROR", "type core_agent: only load balancers of the admin project "
                                 "run on the appliance's own node; change the type to "
                                 "core or external_node")
        node = own if own is not None else appliance_node(store)
        if node is None:
            return [], ("ERROR", "type core_agent: the appliance has no node of its own "
                                 "enrolled (first boot registers it)")
        return [node], None
    if kind == "external_node":
        uuid = lb["type"]["external_node"]
        node = store.collection(NODES).get(uuid)
        if node is None:
            return [], ("ERROR", f"type external_node: node {uuid} not found")
        return [node], None
    members = sorted(store.collection(NODES).by("node_set", lb["uuid"]),
                     key=lambda n: (n.get("set_index") is None, n.get("set_index") or 0,
                                    n["uuid"]))
    if not members:
        return [], ("IN_PROGRESS", f"type core: waiting for the nodes of set {set_name(lb)}")
    return members, None


def addresses(nodes):
    """The nodes' IPv4 addresses, in order; a node with none yet is left out."""
    out = []
    for node in nodes:
        ipv4 = (node.get("default_network") or {}).get("ipv4")
        if ipv4 and ipv4 not in out:
            out.append(ipv4)
    return out


def unplaced(store, lb):
    """The status step's hook: (status, reason) while `lb` has no node, else None."""
    return placed(store, lb)[1]


def node_set(lb, image):
    """The fields the `core` LB's node set should have (reconcile.py writes them). It lives
    in the admin project, out of the LB project's sight, as the reference's does in its
    core's LB project."""
    spec = lb["type"]
    return {"uuid": lb["uuid"], "name": set_name(lb), "project_id": ADMIN_PROJECT,
            "description": f"the nodes of load balancer {lb['uuid']}",
            "tags": ["lbaas"], "cores": spec["cpu"], "ram": spec["ram"],
            "replicas": spec["nodes_number"], "node_type": "VM", "set_type": "SET",
            "disk_spec": {"kind": "root_disk", "image": image, "size": spec["disk_size"],
                          "tier": "WARM", "ephemeral": True},
            "placement_policies": [], "network": None, "lb": lb["uuid"]}
