"""A repository in ERROR keeps its retry back-off across builder processes
(appliance/repo/sync.py): the builder stops when idle and its timer starts it again
(docs/on-demand-daemons.md), so a back-off kept only in memory would start over at 5 s at
each start. The real registry and store, as the builder runs them (daemons/builder.py)."""

import datetime
import logging

from appliance import config
from appliance.registry import build_registry
from appliance.repo.sync import FIRST_RETRY, RepositorySync
from state import Store, format_time, parse_time, utcnow

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


def waited(repo):
    """The wait its record shows after a failure: next_refresh - updated_at."""
    return (parse_time(repo["next_refresh"]) - parse_time(repo["updated_at"])).total_seconds()


def test_a_new_process_goes_on_from_the_wait_the_record_shows(tmp_path):
    store = Store(str(tmp_path / "state"))
    try:
        api = build_registry(dict(config.DEFAULTS, state_dir=str(tmp_path / "state")), store)
        repos = store.collection("repo_repositories")
        repo = repos.insert({
            "name": "gone", "project_id": ADMIN_PROJECT, "sync_mode": "lazy",
            "refresh_rate": 0, "status": "NEW",
            "driver_spec": {"kind": "bootstrap", "manifests_dir": str(tmp_path / "nope")}})
        log = logging.getLogger("test")
        first = RepositorySync(api, log).sync(repo)
        assert first["status"] == "ERROR"
        assert abs(waited(first) - FIRST_RETRY) < 1
        # as its last failure would have left it, 40 s before the next try
        repo = repos.update(first["uuid"], {"next_refresh": format_time(
            utcnow() + datetime.timedelta(seconds=40))})
        again = RepositorySync(api, log).sync(repo)          # a new process: no memory
        assert abs(waited(again) - 80) < 1, waited(again)
        # the refresh action (next_refresh now) starts the back-off over
        repo = repos.update(again["uuid"], {"next_refresh": format_time(utcnow())})
        assert abs(waited(RepositorySync(api, log).sync(repo)) - FIRST_RETRY) < 1
    finally:
        store.close()
