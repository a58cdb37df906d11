"""The status of instances, users and databases from what the members' agents report
(docs/sqldb-failover.md, "Status"). Pure judgements (`judge`, `reported_status`) and the
writes of what changed (`write`), with compare-and-set.

An instance is NEW until it has items; IN_PROGRESS while its members apply them (or a
set's new members are still being made); ACTIVE when the primary runs as primary for the
current epoch and item hash and at least sync_replica_number replicas stream from it, every
other member having applied its item (one lost or not streaming is named in a "degraded"
reason); ERROR with "node <name>: <reason>" when a member fails to apply its current
item, or when the primary is lost and no replica may be promoted.

A user or database is ACTIVE when the primary's report for the current item hash says "ok"
for its name, ERROR with the message it gives, NEW when that report does not name it. While
the primary has not reported the current hash, its status is left as it is (a password
PUT set it NEW already).
"""

from .failover import is_fresh
from .members import DATABASES, INSTANCES, USERS, host_of


def node_judgement(node, item, row, now, limit):
    """{role, status, reason, lsn} of one member."""
    value = (row or {}).get("value") or {}
    out = {"role": value.get("role") or ((item or {}).get("value") or {}).get("role"),
           "status": "NEW", "reason": None, "lsn": value.get("lsn")}
    if item is None:
        out["reason"] = "waiting for the node's address"
    elif item.get("unavailable"):
        out.update(status="IN_PROGRESS", reason=item["unavailable"])
    elif row is None:
        out["reason"] = "not reported yet"
    elif not is_fresh(row, now, limit):
        if row.get("hash") == item["hash"] and row.get("status") == "ACTIVE":
            out.update(status="ERROR", reason=f"lost: no report for more than {limit:g} s")
        else:
            # quiet while applying (a base backup holds the driver's tick): work under way
            out.update(status="IN_PROGRESS", reason=f"applying: no report for more than "
                                                    f"{limit:g} s")
    elif row.get("hash") != item["hash"]:
        out.update(status="IN_PROGRESS", reason="the agent has not applied it yet")
    else:
        out.update(status=row.get("status"), reason=row.get("reason"))
    return out


def judge(instance, nodes, items, rows, now, limit, lost=None, node_set=None):
    """{status, status_reason, node_status, ipsv4} of the instance. `lost`: the failover's
    reason while the primary is lost and nothing may be promoted yet; `node_set`: its set
    record (placement node_set), whose own work (new members, bigger disks) is the
    instance's too."""
    names = {n["uuid"]: n.get("name") or n["uuid"] for n in nodes}
    ipsv4 = [host_of(n) for n in nodes if host_of(n)]
    node_status = {n["uuid"]: node_judgement(n, items.get(n["uuid"]), rows.get(n["uuid"]),
                                             now, limit) for n in nodes}
    out = {"ipsv4": ipsv4, "node_status": node_status}
    primary = instance.get("primary")
    if not primary or not items:
        status = "NEW" if not primary else "IN_PROGRESS"
        return {**out, "status": status, "status_reason": lost or "waiting for nodes"}
    failed = [(u, s) for u, s in node_status.items() if s["status"] == "ERROR"
              and not (s["reason"] or "").startswith("lost:")]
    if failed:
        uuid, s = failed[0]
        return {**out, "status": "ERROR", "status_reason": f"node {names[uuid]}: {s['reason']}"}
    if lost:
        return {**out, "status": "ERROR", "status_reason": lost}
    epoch = instance.get("epoch") or 0
    mine = node_status.get(primary)
    value = (rows.get(primary) or {}).get("value") or {}
    if mine is None or mine["status"] != "ACTIVE" or value.get("epoch") != epoch or \
            value.get("role") != "primary":
        why = (mine or {}).get("reason") or "not primary for this epoch yet"
        return {**out, "status": "IN_PROGRESS",
                "status_reason": f"node {names.get(primary, primary)}: {why}"}
    primary_host = host_of(next(n for n in nodes if n["uuid"] == primary))
    streaming, behind, coming = [], [], []
    for node in nodes:
        if node["uuid"] == primary:
            continue
        s = node_status[node["uuid"]]
        v = (rows.get(node["uuid"]) or {}).get("value") or {}
        if s["status"] == "ACTIVE" and v.get("streaming_from") == primary_host and \
                v.get("epoch") == epoch:
            streaming.append(node["uuid"])
        elif s["status"] in ("NEW", "IN_PROGRESS"):
            # a member still being made or applying: work under way, not a degradation
            coming.append(f"node {names[node['uuid']]}: {s['reason']}")
        else:
            why = "not streaming" if s["status"] == "ACTIVE" else \
                f"not streaming ({s['reason'] or s['status']})"
            behind.append(f"node {names[node['uuid']]} {why}")
    placement = (instance.get("placement") or {}).get("kind", "node_set")
    want = instance.get("nodes_number") or 1
    if placement == "node_set" and len(nodes) < want:
        coming.append(f"waiting for nodes: {len(nodes)} of {want}")
    set_status = (node_set or {}).get("status")
    if set_status == "ERROR":
        # a member's VM failed: the database runs on without it, as with a lost member
        behind.append(f"node set {node_set['name']}: "
                      f"{node_set.get('status_reason') or 'ERROR'}")
    if node_set is not None and not coming and set_behind(instance, node_set):
        coming.append(f"node set {node_set['name']}: waiting for the resize")
    if set_status in ("NEW", "IN_PROGRESS") and not coming:
        coming.append(f"node set {node_set['name']}: "
                      f"{node_set.get('status_reason') or 'in progress'}")
    k = instance.get("sync_replica_number") or 0
    if len(streaming) < k:
        return {**out, "status": "IN_PROGRESS",
                "status_reason": f"waiting for replicas: {len(streaming)} of {k} stream; "
                                 + "; ".join(coming + behind)}
    if coming:
        return {**out, "status": "IN_PROGRESS", "status_reason": "; ".join(coming + behind)}
    return {**out, "status": "ACTIVE",
            "status_reason": ("degraded: " + "; ".join(behind)) if behind else None}


def set_behind(instance, node_set):
    """True while the set does not have the sizes of the instance yet (a PUT the compute
    daemon has not carried to the set): until then the set's own status says nothing."""
    disks = (node_set.get("disk_spec") or {}).get("disks") or [{}, {}]
    data = disks[1] if len(disks) > 1 else {}
    return (node_set.get("cores"), node_set.get("ram"), data.get("size")) != \
        (instance.get("cpu"), instance.get("ram"), instance.get("disk_size")) or \
        (node_set.get("replicas") or 0) < (instance.get("nodes_number") or 1)


def reported_status(section, name, item, row):
    """(status, status_reason) of a user (section "users") or database ("databases") by
    name, from the primary's item and row; None to leave it as it is."""
    if item is None or row is None or row.get("hash") != item["hash"]:
        return None
    said = (((row.get("value") or {}).get(section)) or {}).get(name)
    if said is None:
        return "NEW", None
    return ("ACTIVE", None) if said == "ok" else ("ERROR", str(said))


def only_lsns_moved(instance, judged):
    """True when the judgement differs from the record in the members' lsns alone."""
    def without_lsn(node_status):
        return {u: {k: v for k, v in s.items() if k != "lsn"}
                for u, s in (node_status or {}).items()}
    return judged["node_status"] != instance.get("node_status") and \
        without_lsn(judged["node_status"]) == without_lsn(instance.get("node_status")) and \
        all(instance.get(k) == v for k, v in judged.items() if k != "node_status")


def write(store, instance, judged, primary_item, primary_row, lsns_due=True):
    """Write what changed of the instance, its users and databases (compare-and-set: a
    record written meanwhile is skipped, and that write's change event brings the next
    pass, which judges it again). A change of lsns alone is written only when `lsns_due`
    (the caller spaces them: under write load they move at every report, and each write
    of the instance wakes every agent's long poll and the compute daemon). Returns how
    many records were written."""
    written = 0
    changes = {k: v for k, v in judged.items() if instance.get(k) != v}
    if changes and not lsns_due and only_lsns_moved(instance, judged):
        changes = {}
    if changes:
        written += len(store.collection(INSTANCES).update_many(
            {instance["uuid"]: (instance["revision"], changes)}))
    for kind, section in ((USERS, "users"), (DATABASES, "databases")):
        coll = store.collection(kind)
        updates = {}
        for record in coll.by("instance", instance["uuid"]):
            found = reported_status(section, record["name"], primary_item, primary_row)
            if found is None:
                continue
            if (record.get("status"), record.get("status_reason")) != found:
                updates[record["uuid"]] = (record["revision"],
                                           {"status": found[0], "status_reason": found[1]})
        if updates:
            written += len(coll.update_many(updates))
    return written
