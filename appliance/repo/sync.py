"""Reconcile step of the builder daemon for repositories (spec 2.3 rules 3-4, 3.2).

A NEW repository has its inventory read at once; so has one whose record changed with
`next_refresh` passed (the refresh action sets it to now). Every CHECK_EVERY iterations
all repositories are checked for a passed `next_refresh`. A read stores new elements
(copy: full data; lazy: name and version), removes stale ones but never an installed or
linked one, then ACTIVE with `next_refresh` scheduled (refresh_rate 0: never). An
unreachable or invalid repository goes to ERROR with the reason and is retried with a
back-off that doubles up to the refresh rate (or an hour). The back-off outlives the
builder's process: an on-demand daemon stops when idle and is started again by its timer
(docs/on-demand-daemons.md), and a back-off started over at each start would retry every
few seconds for the minute it runs, every time. So a repository already in ERROR goes on
from the wait its record shows (`next_refresh` - `updated_at`: the last failure's).
"""

import datetime

from appliance.backoff import Backoff
from appliance.tenancy import addresses
from state import format_time, parse_time, utcnow

from .drivers import DriverError, NginxDriver, BootstrapDriver, driver_for

CHECK_EVERY = 10
FIRST_RETRY, MAX_RETRY = 5, 3600
AUTHORITATIVE = (NginxDriver, BootstrapDriver)   # their inventory decides what is stale


class RepositorySync:
    def __init__(self, api, log):
        self.api = api
        self.store = api.store
        self.log = log
        self._seen = {}       # uuid -> revision last handled
        # uuid -> its back-off; the wait itself is the record's next_refresh
        self._backoff = Backoff(FIRST_RETRY, MAX_RETRY)

    @property
    def repositories(self):
        return self.api.resources["/v1/repo/repositories"]

    @property
    def elements(self):
        return self.api.resources["/v1/repo/elements"]

    def reconcile(self, periodic=False):
        """One pass; `periodic` on every CHECK_EVERY-th iteration of the daemon. Returns
        seconds until the next scheduled refresh, or None."""
        now = utcnow()
        soonest = None
        for repo in list(self.store.collection("repo_repositories").records()):
            due_at = parse_time(repo["next_refresh"]) if repo.get("next_refresh") else None
            changed = self._seen.get(repo["uuid"]) != repo["revision"]
            due = due_at is not None and due_at <= now
            if repo["status"] == "NEW" or (due and (changed or periodic)):
                repo = self.sync(repo)
                due_at = parse_time(repo["next_refresh"]) if repo.get("next_refresh") else None
            self._seen[repo["uuid"]] = repo["revision"]
            if due_at is not None:
                wait = max((due_at - utcnow()).total_seconds(), 0.0)
                soonest = wait if soonest is None else min(soonest, wait)
        return soonest

    def sync(self, repo):
        coll = self.store.collection("repo_repositories")
        try:
            added, removed = self._read(repo)
        except (DriverError, ValueError) as e:
            if not self._backoff.failing(repo["uuid"]) and repo["status"] == "ERROR" \
                    and repo.get("next_refresh"):
                # this process's first failure of it: go on from the last process's wait
                # (whole seconds: the record's times have a resolution of their own)
                self._backoff.resume(repo["uuid"], round((
                    parse_time(repo["next_refresh"]) - parse_time(repo["updated_at"])
                ).total_seconds()))
            # never longer than the repository's own refresh rate
            delay = min(self._backoff.failed(repo["uuid"]), repo["refresh_rate"] or MAX_RETRY)
            self.log.warning("repository %s: %s; retrying in %d s", repo["name"], e, delay)
            return coll.update(repo["uuid"], {
                "status": "ERROR", "status_reason": str(e),
                "next_refresh": format_time(utcnow() + datetime.timedelta(seconds=delay))})
        self._backoff.succeeded(repo["uuid"])
        now = utcnow()
        rate = repo["refresh_rate"]
        self.log.info("repository %s: inventory read, %d added, %d removed", repo["name"],
                      added, removed)
        return coll.update(repo["uuid"], {
            "status": "ACTIVE", "status_reason": None, "synced_at": format_time(now),
            "next_refresh": format_time(now + datetime.timedelta(seconds=rate)) if rate
            else None})

    def _read(self, repo):
        elements = self.store.collection("repo_elements")
        stored = list(elements.by("repository", repo["uuid"]))
        driver = driver_for(self.repositories.opened_spec(repo), stored,
                            addresses.for_project(self.store, self.api.settings,
                                                  repo["project_id"]))
        found = driver.inventory()
        existing = {(e["name"], e["version"]): e for e in stored}
        new_records = []
        for key in sorted(set(found) - set(existing)):
            manifest, entry = None, found[key]
            if repo["sync_mode"] == "copy":
                manifest, entry = driver.element(*key)
            new_records.append(self.elements.element_record(repo, entry, manifest))
        created = elements.insert_many(new_records) if new_records else []
        rows = self.elements.artifact_rows(driver, created)
        if rows:
            self.store.collection("repo_artifacts",
                                  unique=[("element", "urn")]).insert_many(rows)
        stale = []
        if isinstance(driver, AUTHORITATIVE):
            stale = [e["uuid"] for key, e in existing.items() if key not in found
                     and e["installation_state"] != "INSTALLED" and not e.get("element")]
        if stale:
            doomed = set(stale)
            elements.delete_where(lambda e: e["uuid"] in doomed)
            self.store.collection("repo_artifacts").delete_where(
                lambda a: a["element"] in doomed)
        return len(created), len(stale)
