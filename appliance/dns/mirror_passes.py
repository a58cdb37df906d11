"""When the mirror daemon (daemons/mirror.py) syncs each domain, and how the outcome shows
in the domain's read-only `mirror` field (docs/dns-mirror.md). The sync of one domain
itself is appliance/dns/mirror.py.

- a domain is synced when its name, its flag or any of its records changed (a fingerprint
  of uuids and revisions; the `mirror` field written here is not part of it, so these
  writes never wake the daemon into a loop), and in any case every resync seconds, to
  catch changes made at the upstream;
- a failed pass (5xx, no answer, refused login or permission) marks the domain ERROR with
  the reason and is retried after a back-off that doubles from RETRY_FIRST_SECONDS up to
  the retry maximum; a local change does not cut the back-off short. One failing domain
  does not hold up the others;
- the `mirror` field is written by compare-and-set on the domain's revision, only the
  `mirror` key, and only when what it shows changed;
- a local domain nested with another project's zone (possible only in data from before
  zones had one owner) is not mirrored: ERROR, until an admin removes one of them.
"""

import logging
import time

from appliance.backoff import Backoff
from appliance.tenancy import zones as zone_rule
from state import NotFound, RevisionConflict

from . import mirror as dnsmirror
from .records import DOMAINS, RECORDS
from .upstream import UpstreamError, extra_setting, upstream_from_settings

RESYNC_SECONDS = 60.0
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 60.0
PUBLISH_ATTEMPTS = 5


def tuning(settings, key, default):
    """A number from the settings, else from APPLIANCE_<KEY>, else `default`."""
    value = extra_setting(settings, key)
    if value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def fingerprint(domain, records):
    """What a pass depends on locally: the domain's name and flag, its records' revisions."""
    return (domain.get("name"), domain.get("project_id"),
            tuple(sorted((r["uuid"], r.get("revision")) for r in records
                         if r.get("type") != "SOA")))


class DomainState:
    def __init__(self, memo):
        self.memo = memo              # dnsmirror.FilterMemo: tag filter knowledge
        self.fingerprint = None
        self.next_at = 0.0            # monotonic: a pass is due from then on, changed or not
        self.failures = 0             # failed passes in a row (for the log; the waits are
                                      # Outcomes.backoff's)
        self.reported = set()         # skipped reasons already logged
        self.skipped = set()          # uuids of the records skipped by the last pass
        self.last_error = None


def outcome(old, status, error, result, memo):
    """The new `mirror` value; `old` itself when nothing worth showing changed (a quiet
    re-sync writes nothing, so the daemon's own write never wakes it into a loop)."""
    core = {"status": status, "last_error": error, "skipped": list(result.skipped),
            "tag_filter": memo.tag_filter,
            "filter_retry_at": dnsmirror.format_time(memo.filter_retry_at)}
    if not result.changed_upstream and all(old.get(k) == v for k, v in core.items()):
        return old
    return {**core, "created": result.created, "updated": result.updated,
            "deleted": result.deleted,
            "synced_at": dnsmirror.format_time(time.time()) if status == "ACTIVE"
            else old.get("synced_at")}


def publish(store, log, uuid, compute):
    """Set the domain's `mirror` to compute(current) by compare-and-set: only that key,
    never over a write that came in between, and nothing when it would not change."""
    domains = store.collection(DOMAINS)
    for _ in range(PUBLISH_ATTEMPTS):
        current = domains.get(uuid)
        if current is None:
            return
        old = current.get("mirror") if isinstance(current.get("mirror"), dict) else {}
        new = compute(dict(old))
        if new == old:
            return
        try:
            domains.update(uuid, {"mirror": new}, expect_revision=current["revision"])
            return
        except RevisionConflict:
            continue
        except NotFound:
            return
    log.warning("domain %s: could not record the mirror status (busy)", uuid)


def show(store, log, domain, status, error, result, st):
    """The outcome of a pass in the domain's `mirror` field."""
    publish(store, log, domain["uuid"], lambda old: outcome(old, status, error, result,
                                                            st.memo))


def announce_plan(store, log, uuid, skipped, steps):
    """IN_PROGRESS before the first upstream write; nothing to show when the only work is
    another try of what was skipped last time (a uuid taken upstream, a record the upstream
    refuses)."""
    if all(op == "create" and step in skipped for op, step in steps):
        return
    publish(store, log, uuid, lambda old: {**old, "status": "IN_PROGRESS"}
            if old.get("status") != "IN_PROGRESS" else old)


class MirrorPasses:
    """The per-domain schedule of the mirror: which domain is due, and its pass."""

    def __init__(self, store, settings, log, realm_uuid):
        self.store, self.log, self.realm_uuid = store, log, realm_uuid
        self.resync_seconds = tuning(settings, "mirror_resync_seconds", RESYNC_SECONDS)
        self.outcomes = Outcomes(store, log, self.resync_seconds, tuning(
            settings, "mirror_retry_max_seconds", RETRY_MAX_SECONDS))
        # None: appliance.dns.mirror.FILTER_RETRY_SECONDS, read at each pass
        self.filter_retry_seconds = tuning(settings, "mirror_filter_retry_seconds", None)
        self.upstream = upstream_from_settings(settings)
        self.domains = {}             # local domain uuid -> DomainState

    def sync_all(self):
        """Sync every due domain; the seconds until the next one is due (None: none)."""
        records = self.store.collection(RECORDS)
        live, soonest = set(), None
        every = self.store.collection(DOMAINS).records()
        for domain in every:
            if not domain.get("sync_to_ecosystem"):
                continue
            uuid = domain["uuid"]
            live.add(uuid)
            st = self.domains.get(uuid)
            if st is None:
                st = self.domains[uuid] = DomainState(
                    dnsmirror.FilterMemo.from_mirror(domain.get("mirror")))
            local = [dict(r) for r in records.by("domain", uuid)]
            others = zone_rule.others_nested(domain["name"], domain.get("project_id"), every)
            # another owner's nested zone coming or going changes what a pass does
            fp = (fingerprint(domain, local), tuple(sorted(o["uuid"] for o in others)))
            due = time.monotonic() >= st.next_at
            if due or (fp != st.fingerprint and self.outcomes.backoff.ready(uuid)):
                self.sync_one(dict(domain), local, fp, st, others)
            wait = st.next_at - time.monotonic()
            soonest = wait if soonest is None else min(soonest, wait)
        for gone in set(self.domains) - live:
            del self.domains[gone]
            self.outcomes.backoff.forget(gone)
        return None if soonest is None else max(soonest, 0.05)

    def sync_one(self, domain, local, fp, st, others=()):
        result = dnsmirror.Result()
        if others:
            return self.outcomes.refuse_nested(domain, fp, st, result)
        st.fingerprint = fp

        def on_plan(steps):
            announce_plan(self.store, self.log, domain["uuid"], st.skipped, steps)
        try:
            dnsmirror.sync_domain(self.upstream, self.realm_uuid, domain, local, st.memo,
                                  filter_retry_seconds=self.filter_retry_seconds,
                                  on_plan=on_plan, result=result, logger=self.log)
        except Exception as e:
            return self.outcomes.failed(domain, st, result, e)
        return self.outcomes.succeeded(domain, st, result)


class Outcomes:
    """The end of one domain's pass: its schedule state (next pass, back-off), the log, and
    its `mirror` field."""

    def __init__(self, store, log, resync_seconds, retry_max):
        self.store, self.log = store, log
        self.resync_seconds = resync_seconds
        # a failed pass waits from RETRY_FIRST_SECONDS (never more than a re-sync), twice
        # as long after each further failure, up to retry_max; per domain uuid
        self.backoff = Backoff(min(RETRY_FIRST_SECONDS, resync_seconds, retry_max), retry_max)

    def refuse_nested(self, domain, fp, st, result):
        # left from before zones had one owner: which owner's records the realm would
        # get is not for the mirror to decide (docs/security.md)
        error = (f"not mirrored: {zone_rule.ANOTHER_OWNER} (a parent or child zone of "
                 "another project); an admin must remove one of the two")
        st.fingerprint, st.next_at = fp, time.monotonic() + self.resync_seconds
        if error != st.last_error:
            self.log.warning("domain %s: %s", domain["name"], error)
        st.last_error = error
        show(self.store, self.log, domain, "ERROR", error, result, st)

    def failed(self, domain, st, result, e):
        if isinstance(e, UpstreamError):
            error = e.message
        else:
            error = f"internal error of the mirror: {type(e).__name__}: {e}"
            self.log.exception("domain %s: the sync raised", domain["name"])
        st.failures += 1
        delay = self.backoff.failed(domain["uuid"])
        st.next_at = self.backoff.until(domain["uuid"])
        # a repeated error is logged once, its retries only at DEBUG
        self.log.log(logging.WARNING if error != st.last_error else logging.DEBUG,
                     "domain %s: sync failed: %s; retrying in %.1f s", domain["name"],
                     error, delay)
        st.last_error = error
        show(self.store, self.log, domain, "ERROR", error, result, st)

    def succeeded(self, domain, st, result):
        name = domain["name"]
        if st.failures:
            self.log.info("domain %s: in step again after %d failed attempts", name,
                          st.failures)
        st.failures, st.last_error = 0, None
        self.backoff.succeeded(domain["uuid"])
        due = self.resync_seconds
        if st.memo.filter_retry_at is not None:
            due = min(due, max(st.memo.filter_retry_at - time.time(), 0.0))
        st.next_at = time.monotonic() + due
        if result.changed_upstream:
            self.log.info("domain %s: %d created, %d updated, %d deleted upstream%s", name,
                          result.created, result.updated, result.deleted,
                          f", {len(result.skipped)} skipped" if result.skipped else "")
        # each skipped record once, not at every re-sync
        for reason in sorted(set(result.skipped) - st.reported):
            self.log.warning("domain %s: skipped %s", name, reason)
        st.reported = set(result.skipped)
        st.skipped = set(result.skipped_uuids)
        show(self.store, self.log, domain, "ACTIVE", None, result, st)
