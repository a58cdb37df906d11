"""Repo Proxy: inventory sync of 2,000 elements from a real nginx, lazy and copy mode,
through the builder daemon (from POST of the repository to ACTIVE).

    python -m tests.bench repo

The API and the builder run as the supervisor and their units start them. Each round
adds one repository per mode, the two modes alternating (lazy, copy, lazy, ...), over the
same nginx site; printed: min / median / max over ROUNDS rounds.
"""

import json
import os
import pathlib
import time

import yaml

from tests.nginx import Nginx, nginx_available, static_site

from . import appliance, note, remove, spread, table, temp_dir, title

ROUNDS = int(os.environ.get("BENCH_REPO_ROUNDS", "3"))
COUNT = 2000
MODES = ("lazy", "copy")
P = "00000000-0000-0000-0000-000000000000"


def publish(root, count):
    elements = {}
    for i in range(count):
        name, version = f"el{i // 10}", f"1.{i % 10}.0"
        base = root / name / version
        (base / "manifests").mkdir(parents=True)
        (base / "manifests" / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": name, "version": version, "resources": {}}))
        entry = {"name": name, "version": version, "artifacts": [], "configs": [],
                 "images": [], "manifests": [f"{name}.yaml"], "templates": [], "index": {}}
        (base / "inventory.json").write_text(json.dumps(entry))
        elements.setdefault(name, {})[version] = entry
    (root / "inventory.json").write_text(json.dumps({"elements": elements}))


def sync(admin, store, url, name, mode):
    """Seconds from the POST of a repository to its ACTIVE (or ERROR), its status and the
    count of elements stored."""
    repos = store.collection("repo_repositories")
    t0 = time.perf_counter()
    resp = admin.post("/v1/repo/repositories", {
        "name": name, "project_id": P, "sync_mode": mode,
        "driver_spec": {"kind": "nginx", "url": url}})
    assert resp.status == 201, resp
    uuid_ = resp.json["uuid"]
    while repos.get(uuid_)["status"] not in ("ACTIVE", "ERROR"):
        time.sleep(0.01)
    elapsed = time.perf_counter() - t0
    return elapsed, repos.get(uuid_)["status"], len(
        store.collection("repo_elements").by("repository", uuid_))


def main():
    title(f"bench_repo: inventory sync of {COUNT} elements from nginx, by the builder, "
          f"{ROUNDS} rounds")
    if not nginx_available():
        note("nginx is not installed: skipped (make test installs it)")
        return
    root = pathlib.Path(temp_dir("repo-site"))
    publish(root, COUNT)
    results = {mode: [] for mode in MODES}
    try:
        with appliance("repo", "builder") as (_, admin, store), \
                Nginx(static_site(root)) as site:
            for round_ in range(ROUNDS):
                for mode in MODES:
                    results[mode].append(sync(admin, store, site.url("/"),
                                              f"bench-{mode}-{round_}", mode))
    finally:
        remove(str(root))
    rows = []
    for mode in MODES:
        runs = results[mode]
        statuses = sorted({status for _, status, _ in runs})
        rows.append([mode, "/".join(statuses), spread([n for _, _, n in runs], "{:,}"),
                     spread([s for s, _, _ in runs]),
                     spread([s / COUNT * 1000 for s, _, _ in runs])])
    table(["mode", "status", "elements min / median / max", "seconds min / median / max",
           "ms per element min / median / max"], rows)
    note("copy fetches every manifest and per-version inventory (2 GETs each); lazy "
         "stores names and versions from one inventory.json")


if __name__ == "__main__":
    main()
