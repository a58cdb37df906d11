"""The API's overhead: an authenticated GET of one item against a bare Bottle app.

    python -m tests.bench api
    BENCH_API_PAIRS=9 BENCH_API_SECONDS=10 python -m tests.bench api   (the issue's runs)

Two servers, each in its own process, both Waitress on 127.0.0.1 with the API's own
adjustments (waitress_settings(): the thread count `make run` ships, and the rest):
- app:  the real API process, started as the supervisor and the unit start it
        (`python -P -m appliance.server`, settings passed by child_environment()),
        so with the logging setup of serve(): the access log on, one line per request,
        written to the process's stderr (a file here, the journal under systemd).
        It answers GET /v1/iam/users/<admin uuid> with a bearer token: token check,
        revocation and user check, permission check, store get, render, JSON.
- bare: a Bottle app with one route of the same path returning the same JSON body
        (byte for byte) from a dict, no log.
The same generator (wrk -t2, or the Python fallback when wrk is unavailable) loads them in
alternating slices (bare, app, bare, app, ...), so that bursts of other load on the machine
hit both alike; each pair gives one ratio app/bare. Printed: min / median / max of those
ratios at -c16 and at -c32, the p99 latency of both sides at -c32, and server CPU per
request. Goals (issue 32): ratio >= 0.8 at -c16 (the run's median, in every run); app
p99 at -c32 <= 1.3x bare's. The app answers a repeated item GET of one token from its
event-loop thread while nothing it depends on changed (appliance/api/answers.py).

Then the filtered list (issue 32), with the same pairing: 1,000 projects in 10
organizations (written through the store by this process, as the API writes them), and
GET /v1/iam/projects?organization=<one of them> (100 projects) against a bare route
answering the same body. Goal: ratio >= 0.6 at -c16. Last, 99,000 more projects in 990 more
organizations (100,000 in all) and BENCH_API_LARGE_ROUNDS (200) sequential requests of
that list on one keep-alive connection, no write between (warm): p50 / p99 / max. Goal:
p99 < 20 ms. BENCH_API_LIST=0 skips both.
"""

import json
import os
import sys
import urllib.parse

from . import (PAIR_HEADERS, Child, api_service, http_get, login, median, note, now,
               pair_ratios, pair_rows, pairs, remove, settings_for, spread, table, temp_dir,
               title, tool_name)

GOAL = 0.6                          # the filtered list's
ITEM_GOAL = 0.8
P99_GOAL = 1.3
PAIRS = int(os.environ.get("BENCH_API_PAIRS", "9"))
SECONDS = int(os.environ.get("BENCH_API_SECONDS", "5"))
CONNECTIONS = (16, 32)
LIST = os.environ.get("BENCH_API_LIST", "1") != "0"
LIST_PATH = "/v1/iam/projects"
LIST_ORGS, PER_ORG = 10, 100
LARGE_ORGS = 1000                   # 100,000 projects
LARGE_ROUNDS = int(os.environ.get("BENCH_API_LARGE_ROUNDS", "200"))
LARGE_P99_GOAL_MS = 20.0
ACCESS = " appliance.access: "      # the access log's logger, in each of its lines


def bare_app(body):
    import bottle
    app = bottle.Bottle()

    @app.route("/v1/iam/users/<uuid>", "GET")
    def get_user(uuid):
        bottle.response.content_type = "application/json"
        return json.dumps(body, separators=(",", ":")).encode()
    return app


def bare_list_app(body):
    import bottle
    app = bottle.Bottle()

    @app.route(LIST_PATH, "GET")
    def list_projects():
        bottle.response.content_type = "application/json"
        return json.dumps(body, separators=(",", ":")).encode()
    return app


def serve_bare(body_file, settings_file, make_app=None):
    """Child side: the bare app (`bare_app`, or `make_app`) on Waitress with the API's
    own adjustments."""
    import waitress
    from appliance.server import waitress_settings
    from . import serve_until_stdin_closes
    with open(body_file) as f:
        body = json.load(f)
    with open(settings_file) as f:
        settings = json.load(f)
    server = waitress.create_server((make_app or bare_app)(body), **waitress_settings(settings))
    serve_until_stdin_closes(server, {"port": server.effective_port})


def serve_bare_list(body_file, settings_file):
    """Child side: the list's bare route, on the same Waitress adjustments."""
    serve_bare(body_file, settings_file, bare_list_app)


def add_projects(state_dir, first_org, orgs):
    """`orgs` organizations of PER_ORG projects each, shaped as the API creates them,
    written through the store (many thousand POSTs would time the writes instead); the
    API process reads them from the journal. Returns the organizations' uuids."""
    from state import Store
    store = Store(state_dir)
    try:
        made = store.collection("iam_organizations", unique=[("name",)]).insert_many(
            [{"name": f"bench-org-{i}", "description": None, "tags": []}
             for i in range(first_org, first_org + orgs)])
        projects = store.collection("iam_projects", unique=[("name", "organization")])
        batch = []
        for org in made:
            batch += [{"name": f"project-{j}", "description": f"bench project {j}",
                       "organization": org["uuid"], "status": "ACTIVE",
                       "tags": ["bench"]} for j in range(PER_ORG)]
            if len(batch) >= 10000:
                projects.insert_many(batch)
                batch = []
        if batch:
            projects.insert_many(batch)
        return [org["uuid"] for org in made]
    finally:
        store.close()


def measure_list(settings, state_dir, work_dir, auth, app):
    """The filtered list against its bare route (pairs), then the same list over 100,000
    projects (sequential). Returns what report_list prints."""
    import http.client
    port = settings["api_port"]
    orgs = add_projects(state_dir, 0, LIST_ORGS)
    path = f"{LIST_PATH}?organization={orgs[LIST_ORGS // 2]}"
    status, app_body = http_get(port, path, auth)
    assert status == 200 and len(json.loads(app_body)) == PER_ORG, (status, app_body[:200])
    body_file = f"{work_dir}/list-body.json"
    with open(body_file, "wb") as f:
        f.write(app_body)
    settings_file = f"{work_dir}/settings.json"
    bare = Child("tests.bench.bench_api", "bare_list", body_file, settings_file)
    try:
        status, bare_body = http_get(bare.info["port"], path)
        assert status == 200 and bare_body == app_body, (status, len(bare_body),
                                                          len(app_body))
        targets = [("bare", f"http://127.0.0.1:{bare.info['port']}{path}", {}, bare),
                   ("app", f"http://127.0.0.1:{port}{path}", auth, app)]
        results = {c: pairs(targets, PAIRS, SECONDS, c) for c in CONNECTIONS}
    finally:
        bare.stop()

    total = LIST_ORGS * PER_ORG + (LARGE_ORGS - LIST_ORGS) * PER_ORG
    add_projects(state_dir, LIST_ORGS, LARGE_ORGS - LIST_ORGS)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    try:
        for i in range(LARGE_ROUNDS + 1):
            t0 = now()
            conn.request("GET", path, headers=auth)
            resp = conn.getresponse()
            raw = resp.read()
            if i:                       # the first reads the 99,000 new projects
                times.append(now() - t0)
            assert resp.status == 200 and raw == app_body, (resp.status, len(raw))
    finally:
        conn.close()
    return {"path": path, "bytes": len(app_body), "results": results, "large": total,
            "times": sorted(times)}


def report_list(measured):
    note("")
    note(f"filtered list: GET {measured['path']}  ({PER_ORG} of "
         f"{LIST_ORGS * PER_ORG:,} projects, {measured['bytes']:,} byte body, identical "
         f"on both); the same pairing")
    results = measured["results"]
    table(["conns", "server"] + PAIR_HEADERS, [row for c in CONNECTIONS for row in pair_rows(
        results[c], [("bare", "bare"), ("app", "app")], first=[f"-c{c}"])])
    for c in CONNECTIONS:
        note(f"list ratio app/bare at -c{c}, per pair: "
             f"{spread(pair_ratios(results[c], 'app', 'bare'))} (min / median / max)")
    p99_app = median([r["p99_ms"] for r in results[32]["app"]])
    p99_bare = median([r["p99_ms"] for r in results[32]["bare"]])
    c16 = median(pair_ratios(results[16], "app", "bare"))
    note(f"list p99 at -c32 (median of slices): app {p99_app:.1f} ms, bare {p99_bare:.1f} "
         f"ms, {p99_app / p99_bare:.2f}x; goal ratio >= {GOAL} at -c16 (median): "
         f"{'met' if c16 >= GOAL else 'NOT met'}")
    times = measured["times"]
    p99 = times[int(0.99 * (len(times) - 1))] * 1000
    note(f"the same list over {measured['large']:,} projects, {len(times)} sequential "
         f"requests (one connection, warm): p50 {median(times) * 1000:.2f} / p99 "
         f"{p99:.2f} / max {times[-1] * 1000:.2f} ms; goal p99 < {LARGE_P99_GOAL_MS:.0f} "
         f"ms: {'met' if p99 < LARGE_P99_GOAL_MS else 'NOT met'}")


def main():
    title("bench_api: authenticated GET of one item vs a bare Bottle app, "
          "the API as `make run` runs it")
    state_dir = temp_dir("api")
    work_dir = temp_dir("api-body")
    app = bare = None
    try:
        settings = settings_for(state_dir)
        app = api_service(settings)
        port = settings["api_port"]
        token = login(port, "admin", settings["admin_password"])
        auth = {"Authorization": f"Bearer {token}"}
        status, raw = http_get(port, "/v1/iam/users?" + urllib.parse.urlencode(
            {"username": "admin"}), auth)
        admin_uuid = json.loads(raw)[0]["uuid"]
        path = f"/v1/iam/users/{admin_uuid}"
        status, app_body = http_get(port, path, auth)
        assert status == 200, (status, app_body)

        body_file = f"{work_dir}/body.json"
        with open(body_file, "wb") as f:
            f.write(app_body)
        settings_file = f"{work_dir}/settings.json"
        with open(settings_file, "w") as f:
            json.dump(dict(settings, api_port=0), f)
        bare = Child("tests.bench.bench_api", "bare", body_file, settings_file)
        status, bare_body = http_get(bare.info["port"], path)
        assert status == 200 and bare_body == app_body, (status, bare_body, app_body)

        note(f"GET {path}  ({len(app_body)} byte body, identical on both)")
        note(f"load: {tool_name()}, 2 client threads; {PAIRS} pairs of {SECONDS} s slices "
             f"(bare, app alternated) at each of -c{' and -c'.join(map(str, CONNECTIONS))}; "
             f"Waitress threads={settings['api_threads']} on both; app log level "
             f"{settings['log_level']} (access log on)")
        lines_before = app.log_count(ACCESS)
        targets = [("bare", f"http://127.0.0.1:{bare.info['port']}{path}", {}, bare),
                   ("app", f"http://127.0.0.1:{port}{path}", auth, app)]
        results = {c: pairs(targets, PAIRS, SECONDS, c) for c in CONNECTIONS}
        served = sum(r["requests"] for c in CONNECTIONS for r in results[c]["app"])
        listed = measure_list(settings, state_dir, work_dir, auth, app) if LIST else None
    finally:
        for child in (bare, app):
            if child is not None:
                child.stop()
        remove(state_dir)
        remove(work_dir)
    # every request the app answered, the warm-ups included, must have its line
    logged = app.log_count(ACCESS) - lines_before
    app.remove_log()

    rows = [row for c in CONNECTIONS for row in pair_rows(
        results[c], [("bare", "bare"), ("app", "app")], first=[f"-c{c}"])]
    table(["conns", "server"] + PAIR_HEADERS, rows)
    for c in CONNECTIONS:
        note(f"ratio app/bare at -c{c}, per pair: "
             f"{spread(pair_ratios(results[c], 'app', 'bare'))} (min / median / max)")
    c16 = pair_ratios(results[16], "app", "bare")
    p99_app = median([r["p99_ms"] for r in results[32]["app"]])
    p99_bare = median([r["p99_ms"] for r in results[32]["bare"]])
    note(f"p99 at -c32 (median of slices): app {p99_app:.1f} ms, bare {p99_bare:.1f} ms, "
         f"{p99_app / p99_bare:.2f}x")
    note(f"goal ratio >= {ITEM_GOAL} at -c16 (median): "
         f"{'met' if median(c16) >= ITEM_GOAL else 'NOT met'}; goal p99 at -c32 <= "
         f"{P99_GOAL}x bare: {'met' if p99_app <= P99_GOAL * p99_bare else 'NOT met'}")
    note(f"access log: {logged} lines for >= {served} requests measured (warm-ups add more)")
    if listed is not None:
        report_list(listed)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve":
        {"bare": serve_bare, "bare_list": serve_bare_list}[sys.argv[2]](*sys.argv[3:])
    else:
        main()
