"""Mirror daemon: keeps every domain with `sync_to_ecosystem: true` in step with the domain
of the same name at the upstream DNS API (spec 2.8; docs/dns-mirror.md).

A shell: the sync of one domain is appliance/dns/mirror.py, and when each domain is synced
and how its outcome shows in its `mirror` field is appliance/dns/mirror_passes.py. It
watches dns_domains and dns_records; without mirror_url or realm_uuid it logs that once
and does nothing.

Tuning (seconds; a setting of that name, else the APPLIANCE_<NAME> variable):
mirror_resync_seconds, mirror_retry_max_seconds, mirror_filter_retry_seconds (the hour
after which a refused tag filter is tried again). mirror_scope (project:<uuid>) scopes
the upstream token.
"""

import re
import sys

from appliance.dns.mirror_passes import MirrorPasses
from appliance.kinds import DNS_DOMAINS, DNS_RECORDS, UUID_PATTERN
from daemons.base import Daemon, run

_UUID = re.compile(UUID_PATTERN)


class Mirror(Daemon):
    name = "mirror"
    kinds = (DNS_DOMAINS, DNS_RECORDS)
    # one pass over every mirrored domain, skipped when neither kind moved and no domain's
    # re-sync, back-off or filter retry (the pass's return value) is due (daemons/base.py)
    whole_pass = True

    def __init__(self, settings=None, store=None):
        super().__init__(settings, store)
        self.realm_uuid = str(self.settings.get("realm_uuid") or "").lower() or None
        self.passes = MirrorPasses(self.store, self.settings, self.log, self.realm_uuid)
        self.tick_seconds = self.passes.resync_seconds
        self.domains = self.passes.domains      # local domain uuid -> DomainState
        self._idle_logged = False

    def configured(self):
        problem = None
        if not self.settings.get("mirror_url") or not self.realm_uuid:
            problem = "mirror_url and realm_uuid must both be set"
        elif not _UUID.match(self.realm_uuid):
            problem = f"realm_uuid {self.realm_uuid!r} is not a UUID"
        if problem is None:
            return True
        if not self._idle_logged:
            self._idle_logged = True
            self.log.warning("the DNS mirror is not configured (%s); it does nothing", problem)
        return False

    def reconcile_pass(self):
        if not self.configured():
            return None
        return self.passes.sync_all()


def main():
    return run(Mirror)


if __name__ == "__main__":
    sys.exit(main())
