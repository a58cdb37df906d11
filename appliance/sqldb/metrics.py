"""The DBaaS family of the infrastructure metrics (docs/metrics-infra.md): per instance
and member node, which node is the primary and how far each replica is behind it, from
what the sqldb daemon already reads at every pass (the members' rows in `ua_resources`,
written by their agents' reports; nothing is asked of a node for it).

Lag in bytes: the primary's reported WAL position (`lsn_int`, pg_current_wal_lsn) minus
the replica's (the greater of what it received and replayed). Lag in seconds: PostgreSQL's
replay timestamps grow on an idle primary too, so instead the planner remembers when it
first saw the primary reach each position; a replica behind is as many seconds behind as
it has been since the primary first went past where the replica is now. Its grain is the
reports' (an agent reports every 2 s while positions move). A member whose row is not
fresh (sqldb_failover_seconds) has no lag series: its numbers are old.
"""

import collections

from appliance.infra_metrics import ResourceGauges, guarded, resource_gauge

from .failover import fresh_reports, lag_bytes

HISTORY = 512                   # primary positions remembered per instance
HISTORY_SECONDS = 3600.0

# published by the one sqldb daemon
_LABELS = ["instance", "name", "project", "node"]
PRIMARY = resource_gauge(
    "appliance_sqldb_primary", "1 for the instance's primary node, 0 for its other members.",
    _LABELS)
LAG_BYTES = resource_gauge(
    "appliance_sqldb_replication_lag_bytes", "WAL bytes a member is behind the instance's "
    "primary (0 for the primary).", _LABELS)
LAG_SECONDS = resource_gauge(
    "appliance_sqldb_replication_lag_seconds", "Seconds since the primary first reported "
    "the WAL position past the member's (0: caught up).", _LABELS)
RUNNING = resource_gauge(
    "appliance_sqldb_member_running", "1 when the member's agent reports PostgreSQL "
    "running, else 0.", _LABELS)


class SqldbMetrics:
    """begin() at a pass's start, observe() per instance, publish() at its end."""

    def __init__(self, limit_seconds):
        self.limit = float(limit_seconds)
        self.gauges = ResourceGauges(PRIMARY, LAG_BYTES, LAG_SECONDS, RUNNING)
        self.history = {}       # instance uuid -> (primary uuid, deque[(seconds, lsn)])
        self.values = None

    def begin(self):
        self.values = self.gauges.empty()

    def observe(self, instance, nodes, rows, now):
        if self.values is not None:
            guarded("sqldb", self._observe, instance, nodes, rows, now)

    def publish(self):
        values, self.values = self.values, None
        if values is not None:
            guarded("sqldb", self._publish, values)

    def _publish(self, values):
        self.gauges.publish(values)
        seen = {labels[0] for labels in values[PRIMARY]}
        for gone in set(self.history) - seen:
            del self.history[gone]

    def _observe(self, instance, nodes, rows, now):
        primary = instance.get("primary")
        t = now.timestamp()
        fresh = fresh_reports(nodes, rows, now, self.limit)
        top = fresh.get(primary, {}).get("lsn_int")
        if top is not None:
            history = self._history(instance["uuid"], primary)
            if not history or top > history[-1][1]:
                history.append((t, top))
            while history and (len(history) > HISTORY or
                               t - history[0][0] > HISTORY_SECONDS and len(history) > 1):
                history.popleft()
        base = (instance["uuid"], instance.get("name") or "", instance.get("project_id") or "")
        for node in nodes:
            labels = base + (node["uuid"],)
            self.values[PRIMARY][labels] = 1 if node["uuid"] == primary else 0
            value = fresh.get(node["uuid"])
            if value is None:
                continue
            self.values[RUNNING][labels] = 1 if value.get("running") else 0
            mine = value.get("lsn_int")
            behind = lag_bytes(top, mine)
            if behind is None:
                continue
            self.values[LAG_BYTES][labels] = behind
            self.values[LAG_SECONDS][labels] = self._seconds_behind(instance["uuid"], mine, t)

    def _history(self, instance_uuid, primary):
        known = self.history.get(instance_uuid)
        if known is None or known[0] != primary:
            # a new primary: positions of the old one say nothing about the new timeline
            known = self.history[instance_uuid] = (primary, collections.deque())
        return known[1]

    def _seconds_behind(self, instance_uuid, lsn, t):
        for seen_at, position in self.history[instance_uuid][1]:
            if position > lsn:
                return max(t - seen_at, 0.0)
        return 0.0
