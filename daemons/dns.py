"""DNS daemon: serves the zones of dns_domains and dns_records on dns_host:dns_port, UDP
and TCP (appliance/dns/server.py), authoritative for every domain in the store.

It builds the zone index before it opens the sockets, so it never answers from an empty
one. After that every write to either kind reaches reconcile() within milliseconds
(through the Daemon shell's change watch): it builds a new index from both kinds and
swaps it in, which also empties the answer cache in the same step. The periodic tick
rebuilds only if the store moved on since the last build.

A port that cannot be bound, or a serving loop that dies, ends the process with exit
status 1, so the supervisor restarts it. SIGTERM/SIGINT stop it cleanly.
"""

import sys
import time


from appliance.dns.server import DNSServer
from appliance.dns.zones import ZoneIndex
from daemons.base import Daemon, run

KINDS = ("dns_domains", "dns_records")


class DNS(Daemon):
    name = "dns"
    kinds = KINDS

    def __init__(self, settings=None, store=None):
        super().__init__(settings, store)
        self.server = DNSServer(self.settings["dns_host"], self.settings["dns_port"],
                                on_failure=self._serving_failed)
        self.failed = False
        self._built = None          # store keys the current index was built from
        self._problems = set()

    def start(self):
        self.rebuild()
        try:
            self.server.bind()
        except OSError as e:
            self.log.error("cannot serve DNS on %s port %s: %s", self.settings["dns_host"],
                           self.settings["dns_port"], e.strerror or e)
            raise SystemExit(1) from None
        self.server.start()
        return super().start()

    def stop(self, timeout=1.0):
        super().stop(timeout)
        self.server.stop()

    def reconcile(self, kind):
        self.rebuild()

    def rebuild(self):
        """Serve a new index if either kind changed since the last build."""
        domains = self.store.collection("dns_domains").snapshot()
        records = self.store.collection("dns_records").snapshot()
        key = (domains.key, records.key)
        if key == self._built:
            return False
        started = time.perf_counter()
        index = ZoneIndex.build(domains.ordered(), records.ordered(),
                                memo=self.server.index.memo)
        self.server.set_index(index)
        self._built = key
        new = [p for p in index.problems if p not in self._problems]
        self._problems = set(index.problems)
        for problem in new:
            self.log.warning("%s", problem)
        self.log.info("serving %d zone(s), %d record(s); built in %.1f ms",
                      len(index.zones), index.record_count,
                      (time.perf_counter() - started) * 1000)
        return True

    def _serving_failed(self):
        self.failed = True
        self._signalled = True      # run_forever() stops, main() exits with status 1


def main():
    return run(DNS)


if __name__ == "__main__":
    sys.exit(main())
