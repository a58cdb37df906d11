"""One pass of the DBaaS control loop over every instance: the first primary, failover,
status, endpoint (docs/sqldb-failover.md). daemons/sqldb.py runs it on every change of
what it reads and every second (a lost node makes no event).
"""

import logging
import time

from appliance.agent.targets import View
from state.collection import utcnow

from . import endpoint, failover, status
from .metrics import SqldbMetrics
from .members import INSTANCES, SETS, nodes_of, rows_of
from .targets import items_of

log = logging.getLogger("appliance.sqldb")


class Planner:
    """Keeps what one process remembers between passes: per instance, since when each
    member's row has said `running: false` (a restart forgets it, which only delays a
    failover), and when its members' lsns were last written."""

    # a change of the members' lsns alone is written at most this often
    lsn_seconds = 30.0

    def __init__(self, store, settings, clock=utcnow):
        self.store, self.settings, self.clock = store, settings, clock
        self.down_since = {}
        self.lsns_written = {}  # instance uuid -> monotonic time of its last node_status write
        self.failed = []        # the instances whose step raised in the last pass
        # seconds from the end of the last pass until a primary's silence counts (None:
        # nothing due); the daemon runs a pass then, not at its next whole second
        self.next_due = None
        self.metrics = SqldbMetrics(settings["sqldb_failover_seconds"])

    def pass_once(self):
        """Returns how many records were written. An instance whose step fails is logged,
        skipped and listed in `failed`, not raised: one broken record must not hold back
        every other's failover, nor put the daemon's every-second pass into its back-off
        (the next second tries it again anyway)."""
        store = self.store
        view = View(store, settings=self.settings)
        written, failed = 0, []
        instances = store.collection(INSTANCES)
        seen = set()
        self.next_due = None
        self.metrics.begin()
        for instance in instances.records():
            seen.add(instance["uuid"])
            try:
                done, view = self.one(instance, view)
            except Exception:
                log.exception("instance %s", instance["uuid"])
                failed.append(instance["uuid"])
                continue
            written += done
        for gone in set(self.down_since) - seen:
            self.down_since.pop(gone, None)
            self.lsns_written.pop(gone, None)
        try:
            written += endpoint.sync(store, self.settings["sqldb_zone"])
        except Exception:
            log.exception("endpoints")
            failed.append("endpoints")
        self.failed = failed
        self.metrics.publish()
        return written

    def one(self, instance, view):
        """The first primary or a failover, then the status, of one instance; returns
        (records written, the view to go on with)."""
        store, limit = self.store, float(self.settings["sqldb_failover_seconds"])
        instances = store.collection(INSTANCES)
        written = 0
        now = self.clock()
        nodes = nodes_of(store, instance)
        rows = rows_of(store, instance, nodes)
        down = failover.track_down(self.down_since.setdefault(instance["uuid"], {}),
                                   rows, now)
        self.metrics.observe(instance, nodes, rows, now)
        # the primary's current item: one applying a new one keeps the whole limit
        items = items_of(view, instance, nodes) if instance.get("primary") else {}
        decision = failover.decide(instance, nodes, rows, now, limit, down,
                                   items.get(instance.get("primary")))
        if decision.action == "none":
            due = failover.next_check(rows.get(decision.primary), now, limit)
            if due is not None:
                self.next_due = due if self.next_due is None else min(self.next_due, due)
        if decision.action in ("first", "failover"):
            done = instances.update_many({instance["uuid"]: (
                instance["revision"], {"primary": decision.primary,
                                       "epoch": decision.epoch})})
            if not done:
                return 0, view      # written meanwhile; its change event brings a pass
            written += 1
            if decision.action == "failover":
                log.warning("instance %s: %s", instance["uuid"], decision.reason)
            instance = done[instance["uuid"]]
            view = View(store, settings=self.settings)     # the items moved with it
            items = items_of(view, instance, nodes)
        waiting = decision.reason if decision.action == "wait" else None
        judged = status.judge(instance, nodes, items, rows, now, limit, waiting,
                              store.collection(SETS).get(instance["uuid"]))
        primary = instance.get("primary")
        due = time.monotonic() >= self.lsns_written.get(instance["uuid"], 0.0) + \
            self.lsn_seconds
        written += status.write(store, instance, judged, items.get(primary),
                                rows.get(primary), lsns_due=due)
        stored = instances.get(instance["uuid"]) or {}
        if instance.get("node_status") != judged["node_status"] and \
                stored.get("node_status") == judged["node_status"]:
            self.lsns_written[instance["uuid"]] = time.monotonic()
        return written, view
