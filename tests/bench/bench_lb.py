"""The LB data plane: the agent's lb driver and its nginx (docs/lb-dataplane.md).

    python -m tests.bench lb

- A change to nginx serving it: a new prefix route is added to an LB and applied by the
  driver (render, candidate, `nginx -t`, swap, reload confirmed); measured from the
  start of apply() until a GET of the new route answers 200 (polled in 1 ms steps).
  p50 / p99 over ROUNDS, and the apply() call alone.
- Proxy overhead: requests/s through the LB's nginx against the same backend served
  directly, as a ratio per side-by-side pair (wrk -t2 -c16), for two backends: a Python
  app on Waitress in its own process (what an LB usually fronts) and a static nginx
  answer (the ceiling: what nginx's proxying itself costs).

Root is needed only for nothing: the node is a directory, nginx runs on 127.0.0.1.
BENCH_LB_ROUNDS and BENCH_LB_SECONDS change the sizes.
"""

import os
import sys
import tempfile
import time
import urllib.request

from . import Child, cpu_seconds, note, pair_ratios, pair_rows, pairs, remove, spread, \
    table, title, tool_name, PAIR_HEADERS

ROUNDS = int(os.environ.get("BENCH_LB_ROUNDS", "30"))
SECONDS = int(os.environ.get("BENCH_LB_SECONDS", "3"))
PAIR_ROUNDS = 3
ADDRESS = "127.0.0.1"


def hello(environ, start_response):
    body = b"hello from the backend\n"
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]


def serve_backend():
    """Child side: the hello app on Waitress (8 threads) until stdin closes."""
    import waitress
    from . import serve_until_stdin_closes
    server = waitress.create_server(hello, host=ADDRESS, port=0, threads=8)
    serve_until_stdin_closes(server, {"port": server.effective_port})


class NginxProcesses:
    """cpu_seconds() of an nginx master and its workers."""

    def __init__(self, pid_fn):
        self.pid_fn = pid_fn

    def cpu_seconds(self):
        pid = self.pid_fn()
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            children = []
        return sum(cpu_seconds(p) for p in [pid, *children])


def status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except OSError as e:
        return getattr(e, "code", None)


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    from appliance.agent.host import Host
    from appliance.lb.node import Driver
    from tests.lb.nginxnode import free_port, item, lb_value, new_uuid, pool, route, vhost
    from tests.nginx import Nginx

    title(f"bench_lb: a route change to nginx serving it ({ROUNDS} rounds); requests/s "
          f"through the LB against the backend directly ({tool_name()}, -c16)")
    base = tempfile.mkdtemp(prefix="bench-lb-")
    backend = static = driver = None
    try:
        backend = Child("tests.bench.bench_lb")
        static = Nginx('location / { return 200 "hello from nginx\\n"; }').start()
        host = Host(root=os.path.join(base, "root"), state_dir=os.path.join(base, "state"),
                    settings={"agent_lb_listen": ADDRESS})
        os.makedirs(host.root, exist_ok=True)
        driver = Driver(host)
        app_pool, static_pool = new_uuid(), new_uuid()
        port = free_port(ADDRESS)
        routes = [route("prefix", "/", app_pool), route("prefix", "/static/", static_pool)]
        value = lb_value([vhost("http", port, routes)],
                         {app_pool: pool(int(backend.info["port"])),
                          static_pool: pool(static.port)})
        result = driver.apply(item(value), None)
        if result["status"] != "ACTIVE":
            raise RuntimeError(f"the LB did not apply: {result}")

        # ---- a change to nginx serving it
        totals, applies = [], []
        for i in range(ROUNDS):
            value["vhosts"][0]["routes"].append(route("exact", f"/new-{i}", static_pool))
            url = f"http://{ADDRESS}:{port}/new-{i}"
            t0 = time.perf_counter()
            result = driver.apply(item(value), None)
            applies.append(time.perf_counter() - t0)
            if result["status"] != "ACTIVE":
                raise RuntimeError(f"round {i}: {result}")
            while status(url) != 200:
                if time.perf_counter() - t0 > 30:
                    raise RuntimeError(f"round {i}: the new route never answered")
                time.sleep(0.001)
            totals.append(time.perf_counter() - t0)
        table(["what", "rounds", "p50 ms", "p99 ms", "max ms"], [
            [name, len(v), f"{pct(v, 50) * 1000:.0f}", f"{pct(v, 99) * 1000:.0f}",
             f"{max(v) * 1000:.0f}"]
            for name, v in (("apply() to the new route answering 200", totals),
                            ("apply() alone (check, swap, reload confirmed)", applies))])

        # ---- proxy overhead
        lb_cpu = NginxProcesses(driver.pid)
        static_cpu = NginxProcesses(lambda: static.proc.pid)
        for label, direct, through, server in (
                ("Waitress app", f"http://{ADDRESS}:{backend.info['port']}/",
                 f"http://{ADDRESS}:{port}/", backend),
                ("static nginx", f"http://127.0.0.1:{static.port}/static/x",
                 f"http://{ADDRESS}:{port}/static/x", static_cpu)):
            results = pairs([("direct", direct, {}, server),
                             ("through", through, {}, lb_cpu)],
                            PAIR_ROUNDS, SECONDS, 16)
            note(f"\n{label} as the backend ({PAIR_ROUNDS} rounds of {SECONDS} s a side; "
                 "the through side's CPU is the LB nginx's alone):")
            table(["side", *PAIR_HEADERS], pair_rows(results, [
                ("direct", "backend directly"), ("through", "through the LB")]))
            note("ratio through / direct, req/s per pair (min / median / max): "
                 + spread(pair_ratios(results, "through", "direct")))
    finally:
        if driver is not None:
            driver.stop_instance(grace=2)
        if static is not None:
            static.cleanup()
        if backend is not None:
            backend.stop()
        remove(base)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--serve":
        serve_backend()
    else:
        main()
