"""Moving a node to another hypervisor: who may ask, which moves are refused, and the
record of a move (docs/compute.md, "Moving a node").

The API writes the request (`migration` on the node: target, requested_at, state
"requested") and never waits; the compute daemon does the move (migrate.py) and writes its
progress and result in the same object. The rules of a move are here once, free of the API
framework and of libvirt: the API refuses with them before it writes anything, and the
daemon checks them again when it starts the move (the world may have moved meanwhile).

A pending move holds room on its target: `reserved` counts a node being moved as placed
on both hypervisors, so that two moves (or a move and a new node) asked at once never
fill one hypervisor twice over.
"""

from . import placement
from .lifecycle import built_by_daemon, wants_power

REQUESTED, RUNNING, DONE, REFUSED, FAILED = "requested", "running", "done", "refused", "failed"
UNDER_WAY = (REQUESTED, RUNNING)
# the API's check and write of a move, under one named store lock
LOCK = "compute-migration"


class Refused(Exception):
    """A move that cannot be: `status` is the HTTP status the API answers (404 for an
    unknown target, 409 for the rest), the message says why and what to do."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def under_way(node):
    return ((node.get("migration") or {}).get("state")) in UNDER_WAY


def target_of(node):
    """The hypervisor a move under way goes to, else None."""
    migration = node.get("migration") or {}
    return migration.get("target") if migration.get("state") in UNDER_WAY else None


def reserved(nodes):
    """`nodes` with each one being moved counted on its target too (a copy of it placed
    there), for placement's capacity."""
    out = list(nodes)
    for node in nodes:
        target = target_of(node)
        if target and target != node.get("hypervisor"):
            out.append({**node, "uuid": node["uuid"] + "#moving", "hypervisor": target})
    return out


def _name(hv):
    return hv.get("name") or hv["uuid"]


def compatible(source, target):
    """Why `target` cannot take a live domain of `source`, or None: the accelerator
    (a KVM guest's CPU model cannot move into TCG, nor back) and the CPU architecture."""
    if (source.get("accel") or None) != (target.get("accel") or None):
        return (f"hypervisor {_name(target)} runs guests under "
                f"{target.get('accel') or 'no accelerator'}, the node's hypervisor "
                f"{_name(source)} under {source.get('accel') or 'no accelerator'}: a live "
                "domain cannot change accelerator; pick a hypervisor with the same accel")
    if source.get("arch") and target.get("arch") and source["arch"] != target["arch"]:
        return (f"hypervisor {_name(target)} is {target['arch']}, the node's hypervisor "
                f"{_name(source)} {source['arch']}: pick one of the same CPU architecture")
    return None


def check(node, hypervisors, nodes, policies, target_uuid=None):
    """The hypervisor record the node may move to, or Refused. `hypervisors`: every
    hypervisor record; `nodes`: every node record (the node's own included);
    `policies`: {uuid: placement policy}. Without `target_uuid`, placement's own sort key
    picks among the ACTIVE, compatible hypervisors other than the node's."""
    if not built_by_daemon(node):
        raise Refused(409, f"node {node['uuid']} is a HW machine: only a VM moves between "
                           "hypervisors")
    if under_way(node):
        migration = node["migration"]
        raise Refused(409, f"node {node['uuid']} is already being moved to hypervisor "
                           f"{migration.get('target')} (asked at "
                           f"{migration.get('requested_at')}): wait for that move to end")
    if node.get("status") != "ACTIVE" or not node.get("hypervisor"):
        raise Refused(409, f"node {node['uuid']} is {node.get('status')}: only an ACTIVE "
                           "node is moved; wait until it is ACTIVE")
    if not wants_power(node):
        raise Refused(409, f"node {node['uuid']} is powered off: a move is live, of a "
                           "running domain; power it on first")
    by_uuid = {h["uuid"]: h for h in hypervisors}
    source = by_uuid.get(node["hypervisor"]) or {"uuid": node["hypervisor"]}
    if source.get("status") != "ACTIVE":
        raise Refused(409, f"the node's hypervisor {_name(source)} is "
                           f"{source.get('status')}: a domain is moved only from an ACTIVE "
                           "hypervisor")
    others = [n for n in reserved(nodes) if n["uuid"] != node["uuid"] and n.get("hypervisor")]
    if target_uuid is not None:
        target = by_uuid.get(target_uuid)
        if target is None:
            raise Refused(404, f"hypervisor {target_uuid} not found")
        if target_uuid == node["hypervisor"]:
            raise Refused(409, f"node {node['uuid']} already runs on hypervisor "
                               f"{_name(target)}: name another one, or none to let "
                               "placement pick")
        if target.get("status") != "ACTIVE":
            raise Refused(409, f"hypervisor {_name(target)} is {target.get('status')}: "
                               "only an ACTIVE hypervisor takes a node")
        why = compatible(source, target)
        if why:
            raise Refused(409, why)
        where, why = placement.place(node, [target], others, policies)
        if where is None:
            raise Refused(409, f"hypervisor {_name(target)} cannot take node "
                               f"{node['uuid']}: {why}")
        return target
    candidates = [h for h in hypervisors if h["uuid"] != node["hypervisor"]
                  and h.get("status") == "ACTIVE" and compatible(source, h) is None]
    if not candidates:
        raise Refused(409, f"no other ACTIVE hypervisor with the accelerator and "
                           f"architecture of {_name(source)} can take node {node['uuid']}")
    where, why = placement.place(node, candidates, others, policies)
    if where is None:
        raise Refused(409, f"no other hypervisor can take node {node['uuid']}: {why}")
    return by_uuid[where]


def request(target, requested_at, source):
    """The `migration` object the API writes."""
    return {"target": target["uuid"], "source": source, "requested_at": requested_at,
            "state": REQUESTED, "progress": None, "reason": None, "finished_at": None}
