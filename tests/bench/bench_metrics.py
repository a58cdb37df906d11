"""What the metrics cost (docs/metrics.md): on the request path, and on the store's writes.

    python -m tests.bench metrics
    BENCH_METRICS_PAIRS=9 BENCH_METRICS_SECONDS=5 python -m tests.bench metrics

Requests: two API processes over one state directory, both Waitress on 127.0.0.1 with the
API's own adjustments and logging (the access log on):
- with:    the real API process (`python -P -m appliance.server`): every request counted
           and timed into prometheus_client's multiprocess files (appliance/metrics.py);
- without: the same app built by build_api() and wrapped in the same access-log middleware,
           but not instrumented, and no metrics enabled.
Both answer GET /v1/iam/users/<admin uuid> with a bearer token. The same generator loads
them in alternating slices; each pair gives one ratio with/without of requests per second.

Store: one process appends N updates to one kind, in alternating rounds with the write
hook off and on (metrics enabled, so into the files): microseconds per write, and the
ratio on/off per round.
"""

import json
import os
import subprocess
import sys
import time
import urllib.parse

from . import (PAIR_HEADERS, ROOT, Child, api_service, http_get, login, median, note,
               pair_ratios, pair_rows, pairs, remove, settings_for, spread, table, temp_dir,
               title, tool_name)

PAIRS = int(os.environ.get("BENCH_METRICS_PAIRS", "7"))
SECONDS = int(os.environ.get("BENCH_METRICS_SECONDS", "4"))
CONNECTIONS = 16
STORE_ROUNDS = 7
STORE_WRITES = 300


def serve_plain(settings_file):
    """Child side: the API app without metrics, served as appliance/server.py serves it."""
    import waitress
    from appliance import logs
    from appliance.api.server_errors import json_errors
    from appliance.api.wsgi import Middleware
    from appliance.app import build_api
    from appliance.server import guard_connections, waitress_settings
    from . import serve_until_stdin_closes
    with open(settings_file) as f:
        settings = json.load(f)
    logs.setup("api", settings["log_level"], queued=True)
    api = build_api(settings)
    api.compile_routes()
    server = waitress.create_server(Middleware(api.app), **waitress_settings(settings))
    json_errors(server)
    guard_connections(server, settings)
    serve_until_stdin_closes(server, {"port": server.effective_port})


def store_writes(state_dir):
    """Child side: microseconds per write, hook off and on, alternating; one JSON line."""
    from appliance import metrics
    from state import Store, observe_writes
    metrics.enable(state_dir)            # the files, as in every appliance process
    store = Store(os.path.join(state_dir, "store"))
    kind = store.collection("bench_metrics")
    record = kind.insert({"name": "x", "count": 0})
    hook = metrics._observe_store_write
    out = {"off": [], "on": []}
    for _ in range(STORE_ROUNDS):
        for side, observer in (("off", None), ("on", hook)):
            observe_writes(observer)
            started = time.perf_counter()
            for n in range(STORE_WRITES):
                kind.update(record["uuid"], {"count": n})
            out[side].append((time.perf_counter() - started) / STORE_WRITES * 1e6)
    print(json.dumps(out))


def requests_part():
    state_dir = temp_dir("metrics")
    work_dir = temp_dir("metrics-settings")
    app = plain = None
    try:
        settings = settings_for(state_dir)
        app = api_service(settings)
        port = settings["api_port"]
        token = login(port, "admin", settings["admin_password"])
        auth = {"Authorization": f"Bearer {token}"}
        status, raw = http_get(port, "/v1/iam/users?" + urllib.parse.urlencode(
            {"username": "admin"}), auth)
        path = f"/v1/iam/users/{json.loads(raw)[0]['uuid']}"
        settings_file = f"{work_dir}/settings.json"
        with open(settings_file, "w") as f:
            json.dump(dict(settings, api_port=0), f)
        plain = Child("tests.bench.bench_metrics", "plain", settings_file)
        status, plain_body = http_get(plain.info["port"], path, auth)
        status_app, app_body = http_get(port, path, auth)
        assert status == status_app == 200 and plain_body == app_body, (status, plain_body)
        note(f"GET {path} with a bearer token; load: {tool_name()}, 2 client threads, "
             f"-c{CONNECTIONS}; {PAIRS} pairs of {SECONDS} s slices (without, with "
             f"alternated); Waitress threads={settings['api_threads']} on both")
        targets = [("without", f"http://127.0.0.1:{plain.info['port']}{path}", auth, plain),
                   ("with", f"http://127.0.0.1:{port}{path}", auth, app)]
        results = pairs(targets, PAIRS, SECONDS, CONNECTIONS)
        scrape_started = time.perf_counter()
        status, text = http_get(port, "/metrics")
        scrape_ms = (time.perf_counter() - scrape_started) * 1000
    finally:
        for child in (plain, app):
            if child is not None:
                child.stop()
        if app is not None:
            app.remove_log()
        remove(state_dir)
        remove(work_dir)
    table(["server"] + PAIR_HEADERS,
          pair_rows(results, [("without", "without metrics"), ("with", "with metrics")]))
    note(f"ratio with/without of req/s, per pair: "
         f"{spread(pair_ratios(results, 'with', 'without'))} (min / median / max)")
    p99 = {side: median([r["p99_ms"] for r in results[side]]) for side in results}
    note(f"p99 (median of slices): with {p99['with']:.1f} ms, without "
         f"{p99['without']:.1f} ms")
    note(f"one scrape of /metrics after the load: {scrape_ms:.1f} ms, {len(text):,} bytes "
         f"(status {status})")


def store_part():
    state_dir = temp_dir("metrics-store")
    try:
        done = subprocess.run([sys.executable, "-m", "tests.bench.bench_metrics", "--serve",
                               "store", state_dir], cwd=ROOT, capture_output=True,
                              text=True, check=True)
        out = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        remove(state_dir)
    ratios = [on / off for on, off in zip(out["on"], out["off"])]
    table(["store write", "us per write min / median / max"],
          [["hook off", spread(out["off"], "{:.0f}")],
           ["hook on (metrics files)", spread(out["on"], "{:.0f}")]])
    note(f"{STORE_ROUNDS} rounds of {STORE_WRITES} updates of one record, off and on "
         f"alternated; ratio on/off per round: {spread(ratios)} (min / median / max)")


def main():
    title("bench_metrics: the cost of the metrics on an authenticated GET and on a store "
          "write")
    requests_part()
    store_part()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve":
        {"plain": serve_plain, "store": store_writes}[sys.argv[2]](*sys.argv[3:])
    else:
        main()
