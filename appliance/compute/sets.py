"""Node sets: members planned from the set, then written to the store.

`plan(node_set, members)` is pure: from a set and its member nodes it works out which
members to create, delete and update, and the set's own read-only fields. The rules
(docs/compute.md, "Sets"):

- member n (0 <= n < replicas) is the node with the hidden `set_index` n, named
  `<set>-<n>`; a missing one is created with the set's template;
- scale-down deletes every member whose index is >= replicas: the highest-numbered go, so
  the survivors are always members 0..replicas-1 (stable across passes);
- rolling update: a member whose template (cores, ram, disk_spec, placement_policies)
  differs from the set's is outdated. One outdated member is updated at a time, and only
  while every up-to-date member is ACTIVE; an up-to-date member in ERROR stops the roll
  and the set is ERROR with that member's reason. A new spec on the set (the fix) makes
  every member outdated again; members in ERROR are then updated first;
- status: ACTIVE when all `replicas` members are up to date and ACTIVE, ERROR when a
  member is (reason `<member>: <its reason>`), else IN_PROGRESS.

`reconcile_sets(store, settings)` runs the plan of every set under one cross-process lock
(so two callers never both create member n) and deletes members of sets that are gone.
"""

import uuid as uuidlib
from dataclasses import dataclass, field

from state.errors import NotFound, RevisionConflict

NODES, SETS = "compute_nodes", "compute_sets"
TEMPLATE = ("cores", "ram", "disk_spec", "placement_policies")
LOCK = "compute-sets"


@dataclass
class Plan:
    create: list = field(default_factory=list)      # new member records
    delete: list = field(default_factory=list)      # member uuids, highest index first
    update: dict = field(default_factory=dict)      # uuid -> (revision, changes)
    set_changes: dict = field(default_factory=dict)  # the set's fields that change


def template(record):
    return {name: record.get(name) for name in TEMPLATE}


def member_name(node_set, index):
    return f"{node_set.get('name') or 'set'}-{index}"


def new_member(node_set, index):
    return {
        "uuid": str(uuidlib.uuid4()), "name": member_name(node_set, index),
        "description": "", "project_id": node_set["project_id"],
        "node_type": node_set.get("node_type") or "VM", "network": node_set.get("network"),
        **template(node_set),
        "hostname": None, "hypervisor": None, "default_network": {},
        "node_set": node_set["uuid"], "set_index": index, "power_state": "on",
        "reboot_requested_at": None, "status": "NEW", "status_reason": None,
    }


def _failed(member):
    return f"{member['name']}: {member.get('status_reason') or 'ERROR'}"


def plan(node_set, members):
    out = Plan()
    replicas = node_set.get("replicas") or 0
    wanted = template(node_set)
    by_index = {}
    for member in sorted(members, key=lambda m: (m.get("created_at") or "", m["uuid"])):
        index = member.get("set_index")
        if index is None or index >= replicas or index in by_index:
            out.delete.append(member)
        else:
            by_index[index] = member
    out.delete = [m["uuid"] for m in sorted(out.delete, key=lambda m: -(m.get("set_index")
                                                                         or 0))]
    out.create = [new_member(node_set, i) for i in range(replicas) if i not in by_index]

    kept = [by_index[i] for i in sorted(by_index)]
    current = [m for m in kept if template(m) == wanted]
    outdated = [m for m in kept if template(m) != wanted]
    stopped = [m for m in current if m.get("status") == "ERROR"]
    if outdated and all(m.get("status") == "ACTIVE" for m in current):
        # a member that failed is retried first: the new spec may be its fix
        member = min(outdated, key=lambda m: (m.get("status") != "ERROR", m["set_index"]))
        changes = {**wanted, "status": "IN_PROGRESS", "status_reason": None}
        out.update[member["uuid"]] = (member["revision"], changes)
        member.update(changes)
        current.append(member)

    final = kept + out.create
    nodes = {m["uuid"]: {"name": m["name"],
                         "ipv4": (m.get("default_network") or {}).get("ipv4"),
                         "status": m.get("status")} for m in final}
    errors = stopped or [m for m in final if m.get("status") == "ERROR"]
    if errors:
        status, reason = "ERROR", _failed(errors[0])
    elif len(current) == replicas and all(m.get("status") == "ACTIVE" for m in final):
        status, reason = "ACTIVE", None
    else:
        status, reason = "IN_PROGRESS", None
    wanted_set = {"nodes": nodes, "status": status, "status_reason": reason}
    out.set_changes = {k: v for k, v in wanted_set.items() if node_set.get(k) != v}
    return out


def reconcile_sets(store, settings=None):
    """One pass over every set; returns the number of records written."""
    from appliance.secret.crypto import SecretBox
    from .resources import seal_agent_key
    sets, nodes = store.collection(SETS), store.collection(NODES)
    writes, box = 0, None
    with store.named_lock(LOCK):
        live = {s["uuid"]: s for s in sets.records()}
        writes += len(nodes.delete_where(
            lambda r: r.get("node_set") is not None and r["node_set"] not in live))
        for node_set in live.values():
            members = [dict(m) for m in nodes.by("node_set", node_set["uuid"])]
            step = plan(node_set, members)
            for uuid in step.delete:
                try:
                    nodes.delete(uuid)
                    writes += 1
                except NotFound:
                    pass
            if step.create:
                box = box or SecretBox(store)
                for member in step.create:
                    member["agent_key"] = seal_agent_key(box, member["uuid"])
                writes += len(nodes.insert_many(step.create))
            if step.update:
                # a member the daemon wrote in between is skipped: its write brings
                # another pass, which plans on the fresh record
                writes += len(nodes.update_many(step.update))
            if step.set_changes:
                try:
                    sets.update(node_set["uuid"], step.set_changes,
                                expect_revision=node_set["revision"])
                    writes += 1
                except (RevisionConflict, NotFound):
                    pass        # a PUT or DELETE got in: the next pass sees it
    return writes
