"""Repo Proxy: inventory sync of 2,000 elements from a real nginx, copy and lazy mode,
through the builder daemon (from POST of the repository to ACTIVE)."""

import json
import pathlib
import time

import yaml

from tests.apiserver import ApiServer
from tests.nginx import Nginx, nginx_available, static_site
from tests.secret.conftest import DaemonProcess

from . import ADMIN_PASSWORD, note, table, temp_dir, title

COUNT = 2000
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


def main():
    title(f"bench_repo: inventory sync of {COUNT} elements from nginx, by the builder")
    if not nginx_available():
        note("nginx is not installed: skipped (make test installs it)")
        return
    root = pathlib.Path(temp_dir("bench-repo-site"))
    publish(root, COUNT)
    srv = ApiServer(temp_dir("bench-repo"), ADMIN_PASSWORD).start()
    builder = DaemonProcess("builder", srv.settings["state_dir"]).start()
    rows = []
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        repos = srv.store.collection("repo_repositories")
        with Nginx(static_site(root)) as site:
            for mode in ("lazy", "copy"):
                t0 = time.perf_counter()
                uuid_ = admin.post("/v1/repo/repositories", {
                    "name": f"bench-{mode}", "project_id": P, "sync_mode": mode,
                    "driver_spec": {"kind": "nginx", "url": site.url("/")}}).json["uuid"]
                while repos.get(uuid_)["status"] not in ("ACTIVE", "ERROR"):
                    time.sleep(0.01)
                elapsed = time.perf_counter() - t0
                stored = len(srv.store.collection("repo_elements").by("repository", uuid_))
                rows.append([mode, repos.get(uuid_)["status"], stored, f"{elapsed:.2f}",
                             f"{elapsed / COUNT * 1000:.2f}"])
        table(["mode", "status", "elements", "seconds", "ms per element"], rows)
        note("copy fetches every manifest and per-version inventory (2 GETs each); lazy "
             "stores names and versions from one inventory.json")
    finally:
        builder.stop()
        srv.stop()


if __name__ == "__main__":
    main()
