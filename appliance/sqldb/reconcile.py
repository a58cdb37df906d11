"""One pass of the DBaaS control loop over every instance: the first primary, failover,
status, endpoint (docs/sqldb-failover.md). daemons/sqldb.py runs it on every change of
what it reads and every second (a lost node makes no event).
"""

import logging

from appliance.agent.targets import View
from state.collection import utcnow

from . import endpoint, failover, status
from .members import INSTANCES, SETS, nodes_of, rows_of
from .targets import items_of

log = logging.getLogger("appliance.sqldb")


class Planner:
    """Keeps what one process remembers between passes: per instance, since when each
    member's row has said `running: false` (a restart forgets it, which only delays a
    failover)."""

    def __init__(self, store, settings, clock=utcnow):
        self.store, self.settings, self.clock = store, settings, clock
        self.down_since = {}

    def pass_once(self):
        """Returns how many records were written."""
        store, limit = self.store, float(self.settings["sqldb_failover_seconds"])
        view = View(store, settings=self.settings)
        written = 0
        instances = store.collection(INSTANCES)
        seen = set()
        for instance in instances.records():
            now = self.clock()
            nodes = nodes_of(store, instance)
            rows = rows_of(store, instance, nodes)
            down = failover.track_down(self.down_since.setdefault(instance["uuid"], {}),
                                       rows, now)
            seen.add(instance["uuid"])
            decision = failover.decide(instance, nodes, rows, now, limit, down)
            if decision.action in ("first", "failover"):
                done = instances.update_many({instance["uuid"]: (
                    instance["revision"], {"primary": decision.primary,
                                           "epoch": decision.epoch})})
                if not done:
                    continue        # written meanwhile; its change event brings a pass
                written += 1
                if decision.action == "failover":
                    log.warning("instance %s: %s", instance["uuid"], decision.reason)
                instance = done[instance["uuid"]]
                view = View(store, settings=self.settings)
            waiting = decision.reason if decision.action == "wait" else None
            items = items_of(view, instance, nodes)
            judged = status.judge(instance, nodes, items, rows, now, limit, waiting,
                                  store.collection(SETS).get(instance["uuid"]))
            primary = instance.get("primary")
            written += status.write(store, instance, judged, items.get(primary),
                                    rows.get(primary))
        for gone in set(self.down_since) - seen:
            self.down_since.pop(gone, None)
        written += endpoint.sync(store, self.settings["sqldb_zone"])
        return written
