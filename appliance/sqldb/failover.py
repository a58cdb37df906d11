"""Who the primary is: pure decisions over an instance, its member nodes, the rows its
members' agents reported (`ua_resources`), the time and the settings
(docs/sqldb-failover.md). The daemon (daemons/sqldb.py) writes what `decide` returns with
one compare-and-set.

A row's freshness is its `updated_at`: the store stamps it on the API's machine at every
write, and every report of an sqldb item is a write (its `checked_at` moves at each 2 s
tick of the node's driver, and the report handler stores only changed rows). A node's
clock never decides.
"""

from collections import namedtuple

from state.collection import parse_time

from .members import host_of

# The silence after which a primary counts as lost when its replicas say they lost it too
# (each fresh one reports that it no longer streams from it), if sqldb_failover_seconds is
# longer: one and a half of the driver's 2 s heartbeats, so one late heartbeat is no loss.
# A primary whose PostgreSQL still serves its replicas (a slow or dead agent, say) keeps
# the whole limit (docs/sqldb-failover.md, "Detection").
CORROBORATED_SECONDS = 3.0

# action: "none" (nothing to do), "first" (the first primary), "failover", or "wait"
# (the primary is lost and no replica may be promoted yet); reason says why
Decision = namedtuple("Decision", "action primary epoch reason")


def age(row, now):
    """Seconds since the row was last written (the store's clock)."""
    return (now - parse_time(row["updated_at"])).total_seconds()


def is_fresh(row, now, limit):
    return row is not None and age(row, now) <= limit


def fresh_reports(nodes, rows, now, limit):
    """{node uuid: its agent's reported value} of the members whose report is fresh."""
    return {n["uuid"]: ((rows.get(n["uuid"]) or {}).get("value") or {})
            for n in nodes if is_fresh(rows.get(n["uuid"]), now, limit)}


def lag_bytes(primary_lsn, lsn):
    """WAL bytes a member is behind the primary's reported position, or None when either
    position is not known (TypeError for a position that is no number)."""
    if primary_lsn is None or lsn is None:
        return None
    return max(primary_lsn - lsn, 0)


def decide(instance, nodes, rows, now, limit, down_since=None, primary_item=None):
    """`nodes`: the member node records; `rows`: {node uuid: row or None}; `now`: an aware
    datetime; `limit`: sqldb_failover_seconds; `down_since`: {node uuid: datetime} of the
    first row that said running false in the current stretch (the daemon keeps it);
    `primary_item`: the primary's current item (its hash), when known."""
    down_since = down_since or {}
    epoch = instance.get("epoch") or 0
    primary = instance.get("primary")
    if not primary:
        return first(instance, nodes)
    uuids = {n["uuid"] for n in nodes}
    row = rows.get(primary)
    gone = replicas_lost(instance, nodes, rows, now, limit) and \
        serving(row, epoch, primary_item)
    lost = lost_reason(primary, uuids, row, now, limit, down_since.get(primary), gone)
    if lost is None:
        return Decision("none", primary, epoch, None)
    replicas = [n for n in nodes if n["uuid"] != primary]
    chosen, why = promotable(instance, replicas, rows, now, limit)
    if chosen is None:
        return Decision("wait", primary, epoch, f"{lost}; {why}")
    return Decision("failover", chosen, epoch + 1, f"{lost}; promoted {chosen} ({why})")


def first(instance, nodes):
    """The member with the lowest node uuid, once all `nodes_number` members exist and
    have an address."""
    want = instance.get("nodes_number") or 1
    if len(nodes) < want:
        return Decision("wait", None, instance.get("epoch") or 0,
                        f"waiting for nodes: {len(nodes)} of {want}")
    without = [n for n in nodes if not host_of(n)]
    if without:
        node = without[0]
        name = node.get("name") or node["uuid"]
        # a VM's comes from IPAM; a HW node's only from its operator: say how
        hint = (f" (a HW node: give it the address it has, e.g. `appliance compute nodes "
                f"update {name} address=<IPv4>`)") if node.get("node_type") == "HW" else ""
        return Decision("wait", None, instance.get("epoch") or 0,
                        f"waiting for the address of node {name}{hint}")
    chosen = min(n["uuid"] for n in nodes)
    return Decision("first", chosen, instance.get("epoch") or 0, "first primary")


def corroborated_limit(limit):
    return min(limit, CORROBORATED_SECONDS)


def replicas_lost(instance, nodes, rows, now, limit):
    """True when the replicas say the primary is gone: at least as many as a promotion
    needs (`promotable`'s quorum) report fresh, running as replicas of the current
    epoch, and not one of them streams from the primary's address (each one's WAL
    receiver lost it, so the positions they report are final)."""
    primary = next((n for n in nodes if n["uuid"] == instance.get("primary")), None)
    if primary is None:
        return False
    host = host_of(primary)
    epoch = instance.get("epoch") or 0
    replicas = [n for n in nodes if n["uuid"] != primary["uuid"]]
    m, k = len(replicas), instance.get("sync_replica_number") or 0
    need = m - k + 1 if k >= 1 else 1
    fresh = []
    for node in replicas:
        row = rows.get(node["uuid"])
        value = (row or {}).get("value") or {}
        if is_fresh(row, now, limit) and value.get("running") and \
                value.get("role") == "replica" and value.get("epoch") == epoch:
            fresh.append(value.get("streaming_from"))
    return m > 0 and len(fresh) >= need and host not in fresh


def serving(row, epoch, item=None):
    """True when the row says its node runs as the primary of `epoch` and has applied its
    current `item` (when given): only then do its replicas' words count. A replica just
    chosen, busy promoting, has never served them; a primary applying a new item may be
    restarting for a changed setting, which stops their streams while its agent, busy
    with it, sends no report."""
    value = (row or {}).get("value") or {}
    applied = item is None or item.get("unavailable") or \
        (row or {}).get("hash") == item.get("hash")
    return value.get("role") == "primary" and value.get("epoch") == epoch and bool(applied)


def lost_reason(primary, uuids, row, now, limit, down_since, replicas_gone=False):
    """Why the primary counts as lost, or None while it does not. `replicas_gone`: its
    replicas say they lost it (`replicas_lost`) and it was serving them (`serving`),
    which shortens the silence that counts to `corroborated_limit`."""
    if primary not in uuids:
        return f"primary node {primary} is gone"
    if row is None:
        return None         # never reported yet: nothing was committed on it either
    # the limit, not the age, in the text: a reason that changed every second would make
    # the status step write the instance every second while it lasts
    if age(row, now) > limit:
        return f"primary node {primary}: no report for more than {limit:g} s"
    fast = corroborated_limit(limit)
    if replicas_gone and age(row, now) > fast:
        return f"primary node {primary}: no report for more than {fast:g} s and no " \
               f"replica streams from it"
    value = row.get("value") or {}
    if value.get("running") is False and down_since is not None and \
            (now - down_since).total_seconds() > limit:
        return f"primary node {primary}: not running for more than {limit:g} s"
    return None


def next_check(row, now, limit):
    """Seconds until the primary's row `row` is old enough for one of the two silences of
    `lost_reason` to count, or None when it is already (or has never reported): the
    daemon's next pass is due then, so that detection does not wait for its period."""
    if row is None:
        return None
    seconds = age(row, now)
    for limit_ in sorted({corroborated_limit(limit), limit}):
        if seconds <= limit_:
            return limit_ - seconds
    return None


def promotable(instance, replicas, rows, now, limit):
    """(node uuid, why) of the replica to promote, or (None, why not). Counts only fresh
    rows of running replicas of the current epoch; with k = sync_replica_number >= 1 it
    needs m - k + 1 of the m replicas (ANY k: every committed transaction is on k of them,
    so one of any m - k + 1 has it), then takes the highest lsn_int (ties: lowest uuid)."""
    epoch = instance.get("epoch") or 0
    m, k = len(replicas), instance.get("sync_replica_number") or 0
    fresh = []
    for node in replicas:
        row = rows.get(node["uuid"])
        value = (row or {}).get("value") or {}
        if is_fresh(row, now, limit) and value.get("running") and \
                value.get("role") == "replica" and value.get("epoch") == epoch and \
                isinstance(value.get("lsn_int"), int) and host_of(node):
            fresh.append((node["uuid"], value["lsn_int"]))
    if m == 0:
        return None, "no replica to promote"
    need = m - k + 1 if k >= 1 else 1
    if len(fresh) < need:
        return None, f"waiting for fresh reports of {need} of {m} replicas (have " \
                     f"{len(fresh)})"
    chosen = min(fresh, key=lambda f: (-f[1], f[0]))
    return chosen[0], f"lsn {chosen[1]}, {len(fresh)} of {m} replicas fresh"


def track_down(down_since, rows, now):
    """Update `down_since` from the rows: a node whose row says running false keeps the
    time first seen; one running again (or gone) is dropped."""
    for node, row in rows.items():
        running = ((row or {}).get("value") or {}).get("running")
        if running is False:
            down_since.setdefault(node, now)
        else:
            down_since.pop(node, None)
    return down_since
