"""DNS daemon: serves the zones of dns_domains and dns_records on dns_host:dns_port, UDP
and TCP (appliance/dns/server.py), authoritative for every domain in the store.

It builds the zone index before it opens the sockets, so it never answers from an empty
one. After that every write to either kind reaches the whole pass within milliseconds
(through the Daemon shell's change watch), and the periodic tick too: the index is rebuilt
when the store moved on since the last build (daemons/base.py, whole pass;
appliance/dns/serving.py builds it).

A port that cannot be bound, or a serving loop that dies, ends the process with exit
status 1, so the supervisor restarts it. SIGTERM/SIGINT stop it cleanly.
"""

import sys

from appliance.dns.server import DNSServer
from appliance.dns.serving import KINDS, ServedZones
from daemons.base import Daemon, run


class DNS(Daemon):
    name = "dns"
    kinds = KINDS
    whole_pass = True

    def __init__(self, settings=None, store=None):
        super().__init__(settings, store)
        self.server = DNSServer(self.settings["dns_host"], self.settings["dns_port"],
                                on_failure=self._serving_failed)
        self.zones = ServedZones(self.store, self.server, self.log)
        self.failed = False

    def start(self):
        self._run_pass()            # the index before the sockets: never an empty answer
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

    def reconcile_pass(self):
        self.zones.rebuild()

    def _serving_failed(self):
        self.failed = True
        self._signalled = True      # run_forever() stops, main() exits with status 1


def main():
    return run(DNS)


if __name__ == "__main__":
    sys.exit(main())
