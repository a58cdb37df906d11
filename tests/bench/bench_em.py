"""Element Manager: install of a 500-resource manifest, and re-render of 500 linked values
after a profile switch, through the real builder daemon.

    python -m tests.bench em

Each round is a fresh appliance: its API and builder processes started as the supervisor
and their units start them, over an empty state directory. The bench installs a manifest
of one profile-set variable and 499 secrets whose default value refers to it, waits for
the element ACTIVE, then activates the other profile and waits until every secret renders
the new value (read by this process through the API's own rendering, from the store, so
that polling does not load the API under measurement). Printed: min / median / max over
ROUNDS rounds.
"""

import os
import time

from . import appliance, note, spread, table, title

ROUNDS = int(os.environ.get("BENCH_EM_ROUNDS", "3"))
COUNT = 500
P = "00000000-0000-0000-0000-000000000000"


def wait(predicate, timeout=300):
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise RuntimeError("timed out")


def manifest(profiles):
    secrets = {f"s{i}": {"name": f"bench-s{i}", "project_id": P,
                         "constructor": {"kind": "plain"},
                         "default_value": f'f"item {i} size {{$bench.vs.variables.$size:value}}"'}
               for i in range(COUNT - 1)}
    return {"name": "bench", "version": "1.0.0", "resources": {
        "$core.vs.variables": {"size": {"name": "bench-size", "project_id": P, "setter": {
            "kind": "profile", "profiles": [{"profile": profiles["develop"], "value": 1},
                                            {"profile": profiles["large"], "value": 8}]}}},
        "$core.secret.secrets": secrets}}


def one_round():
    """Seconds of (install -> ACTIVE, profile switch -> every value re-rendered)."""
    from appliance.app import build_api
    with appliance("em", "builder") as (settings, admin, store):
        profiles = {p["name"]: p["uuid"] for p in admin.get("/v1/vs/profiles").json}
        elements = store.collection("em_elements")
        t0 = time.perf_counter()
        uuid_ = admin.post("/v1/em/manifests", manifest(profiles)).json["uuid"]
        admin.post(f"/v1/em/manifests/{uuid_}/actions/install/invoke", {})
        wait(lambda: (e := elements.find_one(name="bench")) and e["status"] == "ACTIVE")
        install = time.perf_counter() - t0

        render = build_api(settings).resources["/v1/secret/secrets"].render
        secrets = store.collection("secret_secrets")
        t0 = time.perf_counter()
        admin.post(f"/v1/vs/profiles/{profiles['large']}/actions/activate/invoke", {})
        wait(lambda: sum(1 for r in secrets.records() if r["name"].startswith("bench-s")
                         and render(r)["default_value"].endswith("size 8")) == COUNT - 1)
        return install, time.perf_counter() - t0


def main():
    title(f"bench_em: {COUNT}-resource manifest through the builder daemon, {ROUNDS} rounds")
    rounds = [one_round() for _ in range(ROUNDS)]
    installs, switches = [r[0] for r in rounds], [r[1] for r in rounds]
    table(["what", "seconds min / median / max", "per resource ms min / median / max"], [
        [f"install {COUNT} resources -> ACTIVE", spread(installs),
         spread([x / COUNT * 1000 for x in installs])],
        [f"profile switch -> {COUNT - 1} values re-rendered", spread(switches),
         spread([x / (COUNT - 1) * 1000 for x in switches])]])
    note("each round a fresh appliance (API and builder processes, empty state)")


if __name__ == "__main__":
    main()
