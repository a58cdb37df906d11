"""Element Manager: install of a 500-resource manifest, and re-render of 500 linked values
after a profile switch, through the real builder daemon."""

import time

from tests.apiserver import ApiServer
from tests.secret.conftest import DaemonProcess

from . import ADMIN_PASSWORD, note, table, temp_dir, title

COUNT = 500
P = "00000000-0000-0000-0000-000000000000"


def wait(predicate, timeout=300):
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if predicate():
            return
        time.sleep(0.005)
    raise RuntimeError("timed out")


def main():
    title(f"bench_em: {COUNT}-resource manifest through the builder daemon")
    srv = ApiServer(temp_dir("bench-em"), ADMIN_PASSWORD).start()
    builder = DaemonProcess("builder", srv.settings["state_dir"]).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        profiles = {p["name"]: p["uuid"] for p in admin.get("/v1/vs/profiles").json}
        secrets = {f"s{i}": {"name": f"bench-s{i}", "project_id": P,
                             "constructor": {"kind": "plain"},
                             "default_value": f'f"item {i} size {{$bench.vs.variables.$size:value}}"'}
                   for i in range(COUNT - 1)}
        manifest = {"name": "bench", "version": "1.0.0", "resources": {
            "$core.vs.variables": {"size": {"name": "bench-size", "project_id": P, "setter": {
                "kind": "profile", "profiles": [{"profile": profiles["develop"], "value": 1},
                                                {"profile": profiles["large"], "value": 8}]}}},
            "$core.secret.secrets": secrets}}
        elements = srv.store.collection("em_elements")
        t0 = time.perf_counter()
        uuid_ = admin.post("/v1/em/manifests", manifest).json["uuid"]
        admin.post(f"/v1/em/manifests/{uuid_}/actions/install/invoke", {})
        wait(lambda: (e := elements.find_one(name="bench")) and e["status"] == "ACTIVE")
        install = time.perf_counter() - t0

        coll = srv.store.collection("secret_secrets")
        t0 = time.perf_counter()
        admin.post(f"/v1/vs/profiles/{profiles['large']}/actions/activate/invoke", {})
        wait(lambda: sum(1 for r in coll.records() if r["name"].startswith("bench-s")
                         and srv.api.resources["/v1/secret/secrets"].render(r)[
                             "default_value"].endswith("size 8")) == COUNT - 1)
        rerender = time.perf_counter() - t0
        table(["what", "seconds", "per resource ms"], [
            [f"install {COUNT} resources -> ACTIVE", f"{install:.2f}",
             f"{install / COUNT * 1000:.2f}"],
            [f"profile switch -> {COUNT - 1} values re-rendered", f"{rerender:.2f}",
             f"{rerender / (COUNT - 1) * 1000:.2f}"]])
        note("each created or updated resource is one atomic write of its kind's file")
    finally:
        builder.stop()
        srv.stop()


if __name__ == "__main__":
    main()
