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

from .lifecycle import REDO, SET_TEMPLATE, new_node

NODES, SETS, VOLUMES = "compute_nodes", "compute_sets", "compute_volumes"
TEMPLATE = SET_TEMPLATE
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
        "hostname": None, "hypervisor": None, "node_set": node_set["uuid"],
        "set_index": index, "reboot_requested_at": None, **new_node(),
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
        changes = {**wanted, **REDO}
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


def release_volumes(store, node_uuids):
    """Detach the volumes of nodes that are gone (the daemon tears their domains down)."""
    volumes = store.collection(VOLUMES)
    for uuid in node_uuids:
        for volume in volumes.by("node", uuid):
            volumes.update(volume["uuid"], {"node": None})


def delete_members(store, set_uuids):
    """A set's members go with it, and their volumes are released; the members gone."""
    gone = store.collection(NODES).delete_where(lambda r: r.get("node_set") in set_uuids)
    release_volumes(store, [m["uuid"] for m in gone])
    return gone


def reconcile_sets(store, settings=None):
    """One pass over every set; returns the number of records written. Each kind is
    written once per pass (a batch), whatever the number of sets."""
    sets, nodes = store.collection(SETS), store.collection(NODES)
    with store.named_lock(LOCK):
        live = {s["uuid"]: s for s in sets.records()}
        doomed, created, member_updates, set_updates = set(), [], {}, {}
        for record in nodes.records():
            if record.get("node_set") is not None and record["node_set"] not in live:
                doomed.add(record["uuid"])
        for node_set in live.values():
            step = plan(node_set, [dict(m) for m in nodes.by("node_set", node_set["uuid"])])
            doomed.update(step.delete)
            created += step.create
            member_updates.update(step.update)
            if step.set_changes:
                set_updates[node_set["uuid"]] = (node_set["revision"], step.set_changes)
        # the kind's write lock only when there is something to write (every pass runs this)
        gone = nodes.delete_where(lambda r: r["uuid"] in doomed) if doomed else []
        release_volumes(store, [r["uuid"] for r in gone])
        # members get their agent key on the first ask (Nodes.get_private_key), so the
        # compute daemon needs no cryptography and no API framework (tests/supervisor)
        if created:
            nodes.insert_many(created)
        # compare-and-set: a member the daemon wrote in between, or a set a PUT changed, is
        # skipped; that write brings another pass, which plans on the fresh record
        written = nodes.update_many(member_updates) if member_updates else {}
        written_sets = sets.update_many(set_updates) if set_updates else {}
    return len(gone) + len(created) + len(written) + len(written_sets)
