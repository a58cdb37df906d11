"""First start of the Repo Proxy: the realm specification's repo_url, when set, becomes a
repository of the admin project (spec 4.3.1, last paragraph): the URL unchanged (no
project id appended), lazy sync, hourly refresh. Idempotent; a changed URL in the config
updates the repository."""

from appliance.kinds import ADMIN_PROJECT
from state import DuplicateKey, format_time, utcnow

NAME = "realm"


def seed(store, repo_url):
    if not repo_url:
        return None
    repos = store.collection("repo_repositories", unique=[("name", "project_id")])
    spec = {"kind": "nginx", "url": repo_url.rstrip("/")}
    existing = repos.find_one(name=NAME, project_id=ADMIN_PROJECT)
    if existing is not None:
        if existing["driver_spec"] != spec:
            return repos.update(existing["uuid"], {"driver_spec": spec, "status": "NEW",
                                                   "next_refresh": format_time(utcnow())})
        return existing
    try:
        return repos.insert({
            "name": NAME, "description": "the realm's repository (repo_url)",
            "project_id": ADMIN_PROJECT, "status": "NEW", "status_reason": None,
            "priority": 8192, "refresh_rate": 3600, "sync_mode": "lazy",
            "driver_spec": spec, "next_refresh": format_time(utcnow()), "synced_at": None})
    except DuplicateKey:
        return repos.find_one(name=NAME, project_id=ADMIN_PROJECT)
