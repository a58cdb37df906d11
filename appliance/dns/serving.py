"""What the DNS daemon (daemons/dns.py) serves: a zone index built from dns_domains and
dns_records, and swapped into the server in one step (which also empties its answer cache). Each problem of the data
(appliance/dns/zones.py, ZoneIndex.build) is logged once, when it first appears.
"""

import time

from .records import DOMAINS, RECORDS
from .zones import ZoneIndex

KINDS = (DOMAINS, RECORDS)


class ServedZones:
    def __init__(self, store, server, log):
        self.store, self.server, self.log = store, server, log
        self._problems = set()

    def rebuild(self):
        """Serve a new index of the zones as stored now. The daemon calls it only when
        either kind moved on since the last build (daemons/base.py, whole pass)."""
        domains = self.store.collection(DOMAINS).snapshot()
        records = self.store.collection(RECORDS).snapshot()
        started = time.perf_counter()
        index = ZoneIndex.build(domains.ordered(), records.ordered(),
                                memo=self.server.index.memo)
        self.server.set_index(index)
        new = [p for p in index.problems if p not in self._problems]
        self._problems = set(index.problems)
        for problem in new:
            self.log.warning("%s", problem)
        self.log.info("serving %d zone(s), %d record(s); built in %.1f ms",
                      len(index.zones), index.record_count,
                      (time.perf_counter() - started) * 1000)
