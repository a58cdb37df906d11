"""An instance's connection and replication state, as the API shows it (GET
.../instances/<uuid>/actions/replication, the web console's DBaaS page, `appliance sqldb
instances replication`): how a client connects, which node is the primary, and how far
each member is behind it in WAL bytes.

Read from what the sqldb daemon decides on (the members' `ua_resources` rows their agents
report, members.rows_of; freshness as failover.is_fresh), so the answer and the daemon's
failover see the same data. The lag in seconds needs the history the daemon keeps in its
memory: it is in the metrics (appliance_sqldb_replication_lag_seconds), not here.
"""

from state.collection import utcnow

from .failover import age, fresh_reports, lag_bytes
from .members import host_of, nodes_of, rows_of


def replication(store, settings, instance, users=(), databases=()):
    now = utcnow()
    limit = float(settings["sqldb_failover_seconds"])
    nodes = nodes_of(store, instance)
    rows = rows_of(store, instance, nodes)
    primary = instance.get("primary")
    fresh = fresh_reports(nodes, rows, now, limit)
    top = fresh.get(primary, {}).get("lsn_int")
    node_status = instance.get("node_status") or {}
    members = []
    for node in nodes:
        row, value = rows.get(node["uuid"]), fresh.get(node["uuid"])
        members.append({
            "node": node["uuid"], "name": node.get("name"), "address": host_of(node),
            "role": "primary" if node["uuid"] == primary else "replica",
            "status": node_status.get(node["uuid"], {}).get("status"),
            "running": value.get("running") if value is not None else None,
            "lsn": node_status.get(node["uuid"], {}).get("lsn"),
            "lag_bytes": _shown_lag(top, value),
            "reported_seconds_ago": round(age(row, now), 3) if row else None,
            "fresh": value is not None})
    host, port = instance.get("endpoint"), int(settings["sqldb_port"])
    user = users[0] if len(users) == 1 else "USER"
    database = databases[0] if len(databases) == 1 else "DATABASE"
    return {
        "instance": instance["uuid"], "status": instance.get("status"),
        "host": host, "port": port, "addresses": instance.get("ipsv4") or [],
        "uri": f"postgresql://{user}@{host}:{port}/{database}" if host else None,
        "users": list(users), "databases": list(databases),
        "primary": primary, "epoch": instance.get("epoch") or 0,
        "sync_replica_number": instance.get("sync_replica_number"),
        "members": members}


def _shown_lag(top, value):
    """The member's lag, None without a fresh report; a report that holds no number shows
    no lag rather than failing the read (the daemon's metrics count it as an error)."""
    if value is None:
        return None
    try:
        return lag_bytes(top, value.get("lsn_int"))
    except TypeError:
        return None


_MEMBER = {"type": "object", "properties": {
    "node": {"type": "string"}, "name": {"type": ["string", "null"]},
    "address": {"type": ["string", "null"]}, "role": {"enum": ["primary", "replica"]},
    "status": {"type": ["string", "null"]}, "running": {"type": ["boolean", "null"]},
    "lsn": {}, "lag_bytes": {"type": ["integer", "null"],
                             "description": "WAL bytes behind the primary (null: no fresh "
                                            "report)"},
    "reported_seconds_ago": {"type": ["number", "null"]}, "fresh": {"type": "boolean"}}}
RESPONSE_SCHEMA = {"type": "object", "properties": {
    "instance": {"type": "string"}, "status": {"type": ["string", "null"]},
    "host": {"type": ["string", "null"], "description": "the primary's DNS name"},
    "port": {"type": "integer"}, "addresses": {"type": "array", "items": {"type": "string"}},
    "uri": {"type": ["string", "null"],
            "description": "postgresql://USER@host:port/DATABASE (the instance's user and "
                           "database when it has one of each); no password"},
    "users": {"type": "array", "items": {"type": "string"}},
    "databases": {"type": "array", "items": {"type": "string"}},
    "primary": {"type": ["string", "null"]}, "epoch": {"type": "integer"},
    "sync_replica_number": {"type": ["integer", "null"]},
    "members": {"type": "array", "items": _MEMBER}}}
