"""The platform-side step of LBs of type `core`: each one's node set `lbaas-<name>` made,
resized and deleted (docs/lb.md, "Type core"). The compute daemon runs it at the start of
its pass, just before the sets' own step gives the set its members, so an LB's nodes
come in the same pass.

The set is an ordinary set of the admin project whose uuid is the LB's and whose hidden
field `lb` names it; everything else about its nodes (placement, seed, agent enrollment,
rolling update) is compute's.
"""

from appliance.compute.sets import release_volumes

from . import placement

LBS, SETS, NODES = "network_lb", "compute_sets", "compute_nodes"
# what the LB decides about its set; a change of any moves the set to IN_PROGRESS
OWNED = ("name", "cores", "ram", "replicas", "disk_spec")


def delete_set(store, lb_uuid):
    """The LB's set and its members, gone; returns how many records went."""
    gone = store.collection(SETS).delete_where(lambda r: r.get("lb") == lb_uuid)
    members = store.collection(NODES).delete_where(
        lambda r: r.get("node_set") in {s["uuid"] for s in gone})
    release_volumes(store, [m["uuid"] for m in members])
    return len(gone) + len(members)


def reconcile_lb_sets(store, settings):
    """One pass; returns the number of records written."""
    image = settings.get("lb_image")
    sets = store.collection(SETS)
    wanted = {lb["uuid"]: lb for lb in store.collection(LBS).records()
              if (lb.get("type") or {}).get("kind") == "core"}
    written = 0
    for record in [s for s in sets.records() if s.get("lb")]:
        if record["lb"] not in wanted:
            written += delete_set(store, record["lb"])
    updates, fresh = {}, []
    for lb in wanted.values():
        if not image:
            continue        # the LB's status says it waits for its set
        want = placement.node_set(lb, image)
        current = sets.get(lb["uuid"])
        if current is None:
            fresh.append({**want, "nodes": {}, "status": "NEW", "status_reason": None})
            continue
        changes = {k: want[k] for k in OWNED if current.get(k) != want[k]}
        if changes:
            changes.update(status="IN_PROGRESS", status_reason=None)
            updates[current["uuid"]] = (current["revision"], changes)
    if fresh:
        sets.insert_many(fresh)
    # compare-and-set: a set the sets' step wrote meanwhile is resized on the next pass
    done = sets.update_many(updates) if updates else {}
    return written + len(fresh) + len(done)
