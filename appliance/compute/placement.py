"""Placement: which hypervisor takes a node (pure; no store, no libvirt).

Capacity of a hypervisor = `all_cores x cores_ratio`, `all_ram x ram_ratio`, `all_disk`
(the storage pool is not overcommitted: a thin overlay can still fill up), minus what the
nodes already placed there ask for. Only ACTIVE hypervisors take nodes.

Policies (`compute_placement_policies`, by the node's `placement_policies`); a policy's
group is the placed nodes that name the same policy:
- hard-affinity: only a hypervisor that already holds a member of the group (any, when
  the group has none placed yet);
- hard-anti-affinity: only a hypervisor that holds no member of the group;
- soft-affinity / soft-anti-affinity: never exclude, only rank.

The choice among the hypervisors left is ONE sort key, smallest first (`_rank`), in the
style of resolvelib's preference key: every rule is a term of the tuple, earlier terms win,
so the order of the rules is read off one line instead of a chain of ifs:
    (members of soft-anti-affinity groups there,   # spread those groups
     - members of soft-affinity groups there,       # pack those groups
     - free RAM after placing the node (MB),        # then spread load by RAM,
     - free cores after placing the node,           # then by cores,
     hypervisor uuid)                               # and break ties stably.
"""

HARD_AFFINITY, HARD_ANTI = "hard-affinity", "hard-anti-affinity"
SOFT_AFFINITY, SOFT_ANTI = "soft-affinity", "soft-anti-affinity"
# the kinds a placement policy may have (the API's enum, in the reference's order)
POLICY_KINDS = (SOFT_ANTI, HARD_ANTI, SOFT_AFFINITY, HARD_AFFINITY)


def node_disk(node):
    """GB of storage a node's `disk_spec` asks for (the root disk plus its extra disks)."""
    spec = node.get("disk_spec") or {}
    if spec.get("kind") == "disks":
        return sum(int(d.get("size") or 0) for d in spec.get("disks") or [])
    return int(spec.get("size") or 0)


def capacity(hypervisor):
    """(cores, ram MB, disk GB) the hypervisor offers in all, ratios applied."""
    return (int(hypervisor.get("all_cores") or 0) * float(hypervisor.get("cores_ratio") or 1.0),
            int(hypervisor.get("all_ram") or 0) * float(hypervisor.get("ram_ratio") or 1.0),
            int(hypervisor.get("all_disk") or 0))


def free(hypervisor, placed_nodes):
    """(cores, ram, disk) left on the hypervisor once `placed_nodes` (all nodes, any
    hypervisor) have taken theirs."""
    cores, ram, disk = capacity(hypervisor)
    for n in placed_nodes:
        if n.get("hypervisor") == hypervisor["uuid"]:
            cores -= int(n.get("cores") or 0)
            ram -= int(n.get("ram") or 0)
            disk -= node_disk(n)
    return cores, ram, disk


def _members(policy_uuid, hypervisor_uuid, placed_nodes, node_uuid):
    return sum(1 for n in placed_nodes
               if n.get("hypervisor") == hypervisor_uuid and n["uuid"] != node_uuid
               and policy_uuid in (n.get("placement_policies") or []))


def _group_placed(policy_uuid, placed_nodes, node_uuid):
    return any(n.get("hypervisor") and n["uuid"] != node_uuid
               and policy_uuid in (n.get("placement_policies") or []) for n in placed_nodes)


def place(node, hypervisors, placed_nodes, policies):
    """(hypervisor uuid, None), or (None, reason) naming what is short: cores, RAM, disk,
    or a policy by name. `policies` maps uuid -> policy record (the node's, at least);
    `placed_nodes` are the nodes with a hypervisor (the node itself is left out)."""
    others = [n for n in placed_nodes if n["uuid"] != node["uuid"] and n.get("hypervisor")]
    active = [h for h in hypervisors if h.get("status") == "ACTIVE"]
    if not active:
        return None, "no ACTIVE hypervisor"
    want = (int(node.get("cores") or 0), int(node.get("ram") or 0), node_disk(node))
    mine = [policies[p] for p in node.get("placement_policies") or [] if p in policies]
    fitting, short = [], {}
    for hv in active:
        left = free(hv, others)
        lacks = [(what, need, have) for what, need, have in
                 zip(("cores", "RAM", "disk"), want, left) if need > have]
        for what, need, have in lacks:
            best = short.get(what)
            short[what] = (need, have if best is None else max(best[1], have))
        if not lacks:
            fitting.append((hv, left))
    if not fitting:
        units = {"cores": "", "RAM": " MB", "disk": " GB"}
        return None, "no hypervisor has enough " + ", ".join(
            f"{what} (needs {need:g}{units[what]}, at most {max(have, 0):g}{units[what]} free)"
            for what, (need, have) in short.items())
    allowed = fitting
    for policy in mine:
        kind, uuid = policy.get("kind") or SOFT_ANTI, policy["uuid"]
        if kind == HARD_ANTI:
            allowed = [(h, l) for h, l in allowed
                       if not _members(uuid, h["uuid"], others, node["uuid"])]
        elif kind == HARD_AFFINITY and _group_placed(uuid, others, node["uuid"]):
            allowed = [(h, l) for h, l in allowed
                       if _members(uuid, h["uuid"], others, node["uuid"])]
        if not allowed:
            return None, (f"placement policy {policy.get('name') or uuid!r} ({kind}) "
                          "leaves no hypervisor with room for the node")

    def _rank(item):
        hv, (cores, ram, _disk) = item
        count = {SOFT_ANTI: 0, SOFT_AFFINITY: 0}
        for policy in mine:
            kind = policy.get("kind") or SOFT_ANTI
            if kind in count:
                count[kind] += _members(policy["uuid"], hv["uuid"], others, node["uuid"])
        return (count[SOFT_ANTI], -count[SOFT_AFFINITY], -(ram - want[1]),
                -(cores - want[0]), hv["uuid"])

    return min(allowed, key=_rank)[0]["uuid"], None
