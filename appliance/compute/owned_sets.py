"""Hidden node sets owned by another resource: an LB of type core (appliance/lb/
reconcile.py) or a DBaaS instance (appliance/sqldb/sets.py). The owner decides the set's
size and template; compute's own step (sets.py) then gives the set its members.

Such a set is an ordinary set of the admin project whose uuid is its owner's and whose
hidden field `<field>` ("lb", "sqldb") names the owner. A set whose owner is gone goes
with its nodes; a change of what the owner decides moves the set to IN_PROGRESS.
"""

from .lifecycle import NEW, REDO
from .sets import SETS, delete_members

# what an owner decides about its set
OWNED = ("name", "cores", "ram", "replicas", "disk_spec")


def delete_owned(store, field, owner_uuid):
    """The owner's set and its members, gone; returns how many records went."""
    gone = store.collection(SETS).delete_where(lambda r: r.get(field) == owner_uuid)
    members = delete_members(store, {s["uuid"] for s in gone})
    return len(gone) + len(members)


def reconcile_owned(store, field, owners, desired):
    """One pass over the sets of `field`'s owners; returns the number of records written.
    `owners`: {owner uuid: owner record} of those that want a set now; `desired(owner,
    current set or None)` gives the set record wanted, or None while it cannot be made
    (its owner's status says why)."""
    sets = store.collection(SETS)
    written = 0
    for record in [s for s in sets.records() if s.get(field)]:
        if record[field] not in owners:
            written += delete_owned(store, field, record[field])
    updates, fresh = {}, []
    for owner in owners.values():
        current = sets.get(owner["uuid"])
        want = desired(owner, current)
        if want is None:
            continue
        if current is None:
            fresh.append({**want, "nodes": {}, **NEW})
            continue
        changes = {k: want[k] for k in OWNED if current.get(k) != want[k]}
        if changes:
            changes.update(REDO)
            updates[current["uuid"]] = (current["revision"], changes)
    if fresh:
        sets.insert_many(fresh)
    # compare-and-set: a set the sets' step wrote meanwhile is resized on the next pass
    done = sets.update_many(updates) if updates else {}
    return written + len(fresh) + len(done)
