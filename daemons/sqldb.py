"""DBaaS daemon: the first primary, failover, status and endpoint of every instance
(appliance/sqldb/reconcile.py, docs/sqldb-failover.md). This is its process shell.

Every watched kind leads to the same whole pass, coalesced: any number of changes while a
pass runs make one more pass. A pass also runs every second, because a lost primary makes
no event: its row just stops being written; and one runs at the moment a primary's silence
starts to count, so that detection does not wait up to a second more.
"""

import sys

from appliance.kinds import (COMPUTE_NODES, COMPUTE_SETS, NETWORK_NETWORKS, SQLDB_DATABASES,
                             SQLDB_INSTANCES, SQLDB_USERS, SQLDB_VERSIONS, UA_RESOURCES)
from appliance.sqldb.reconcile import Planner
from daemons.base import PASS, STAY, Daemon, run


DUE_MARGIN = 0.02


class Sqldb(Daemon):
    name = "sqldb"
    kinds = (SQLDB_INSTANCES, SQLDB_USERS, SQLDB_DATABASES, SQLDB_VERSIONS, UA_RESOURCES,
             COMPUTE_NODES, COMPUTE_SETS, NETWORK_NETWORKS)
    tick_seconds = 30.0
    period_seconds = 1.0
    whole_pass = True

    def start(self):
        self.planner = Planner(self.store, self.settings)
        return super().start()

    def schedule_jobs(self, scheduler):
        scheduler.every(self.period_seconds).seconds.do(self.request, PASS)

    def pass_due(self):
        return True             # a lost primary makes no event: every pass runs

    def reconcile_pass(self):
        self.planner.pass_once()
        due = self.planner.next_due
        if due is not None and due < self.period_seconds:
            # just after the silence of a primary starts to count: detection then waits
            # for no period (the pass's age comparisons are strict)
            self.request_in(PASS, due + DUE_MARGIN)

    def idle_wake_at(self):
        # an instance's primary is watched every second: its loss writes nothing
        return STAY if self.store.collection(SQLDB_INSTANCES).records() else None


def main():
    return run(Sqldb)


if __name__ == "__main__":
    sys.exit(main())
