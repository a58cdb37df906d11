"""Benchmarks of the appliance: run with `python -m tests.bench [store] [api] [iam]`.

They print figures and never assert timings. Everything here is shared by the bench
modules: timing, tables, the HTTP load generator (wrk, or a Python fallback) and the
child processes that serve while the parent measures.
"""

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import http.client
import multiprocessing
import re
import urllib.parse

from tests import processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

ADMIN_PASSWORD = "bench-admin-password"


# ---- timing and printing ----------------------------------------------------------------

def now():
    return time.perf_counter()


def timed(fn, repeat=1):
    """Seconds of each of `repeat` calls of fn(); returns (times, last result)."""
    times, result = [], None
    for _ in range(repeat):
        t0 = now()
        result = fn()
        times.append(now() - t0)
    return times, result


def median(values):
    return statistics.median(values)


def ms(seconds):
    return f"{seconds * 1000:.2f}"


def us(seconds):
    return f"{seconds * 1e6:.1f}"


def title(text):
    print()
    print(text)
    print("=" * len(text))
    load1, load5, _ = os.getloadavg()
    print(f"(machine load average before: {load1:.2f} over 1 min, {load5:.2f} over 5 min,"
          f" {os.cpu_count()} cores)")
    sys.stdout.flush()


def table(headers, rows):
    """Print rows (lists of values) under headers, columns aligned, numbers on the right."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(row, header=False):
        out = []
        for i, c in enumerate(row):
            numeric = not header and re.match(r"^[-+~<>=x.,/0-9 %]+$", c) is not None
            out.append(c.rjust(widths[i]) if numeric else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    print(fmt(cells[0], header=True))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(fmt(row))
    sys.stdout.flush()


def note(text):
    print(text)
    sys.stdout.flush()


def temp_dir(prefix):
    return tempfile.mkdtemp(prefix=f"bench-{prefix}-")


def remove(path):
    shutil.rmtree(path, ignore_errors=True)


# ---- child processes that serve ---------------------------------------------------------

class Child:
    """`python -m <module> --serve ARGS...` in its own process (its own GIL). The child
    prints one JSON line when it listens and serves until its stdin closes."""

    def __init__(self, module, *args):
        self.log = tempfile.NamedTemporaryFile(prefix="bench-child-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--serve", *map(str, args)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            text=True)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"{module} --serve exited ({self.proc.returncode}):\n"
                               + self.log_text())
        self.info = json.loads(line)

    def cpu_seconds(self):
        return cpu_seconds(self.proc.pid)

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        processes.stop(self.proc, signum=None)     # the closed stdin asked it to end
        self.log.close()
        os.unlink(self.log.name)


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Service:
    """A process of the appliance (the API or a daemon, by its supervisor name) started as
    its unit and the supervisor start it: `python -P -m <module>` with the environment of
    child_environment(settings), so with the logging, thread count and settings users run.
    Its log (stdout and stderr) goes to a file. `ready(service)` is polled until true.
    `prefix` goes before the command (`ip netns exec NS`: tests/compute/netns.py)."""

    def __init__(self, name, settings, ready, timeout=90, prefix=()):
        from appliance import supervisor
        (module,) = [m for n, m in supervisor.child_modules() if n == name]
        self.name, self.settings = name, settings
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log",
                                               delete=False)
        # systemd gives a unit PATH and little else
        env = supervisor.child_environment(settings, environ={"PATH": os.environ["PATH"]})
        self.proc = subprocess.Popen([*prefix, *supervisor.python_command(module)],
                                     cwd=ROOT, env=env,
                                     stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + timeout
        while not ready(self):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not start:\n" + self.log_text())
            time.sleep(0.05)

    def cpu_seconds(self):
        return cpu_seconds(self.proc.pid)

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-4000:]

    def log_count(self, text):
        """Lines of the log that contain `text`."""
        with open(self.log.name, errors="replace") as f:
            return sum(text in line for line in f)

    def stop(self):
        processes.stop(self.proc)
        self.log.close()

    def remove_log(self):
        os.unlink(self.log.name)


def settings_for(state_dir, **overrides):
    """The settings of an appliance over `state_dir` on free loopback ports."""
    from appliance import config
    from tests.apiserver import free_port
    return config.load(environ={}, overrides={
        "state_dir": state_dir, "admin_password": ADMIN_PASSWORD, "api_host": "127.0.0.1",
        "api_port": free_port(), "dns_host": "127.0.0.1", "dns_port": free_port(),
        **overrides})


def api_ready(service):
    try:
        return http_get(service.settings["api_port"], "/v1/health")[0] == 200
    except OSError:
        return False


def daemon_ready(service):
    """A daemon says so once it watches its kinds (daemons/base.py)."""
    return service.log_count("started; watching") > 0


def api_service(settings):
    """The API on settings["api_port"]. A port found free can be taken before the API binds
    it (a test suite beside the bench did, 2026-11-28): then the API is started on another
    (written into `settings`, which the callers read afterwards), at most twice more."""
    from tests.apiserver import free_port
    for attempt in range(3):
        try:
            return Service("api", settings, api_ready)
        except RuntimeError as e:
            if "Address already in use" not in str(e) or attempt == 2:
                raise
            note(f"(port {settings['api_port']} was taken before the API bound it; "
                 "another one)")
            settings["api_port"] = free_port()


@contextlib.contextmanager
def appliance(prefix, *daemons):
    """A fresh appliance over a new state directory: the API and the daemons named, each
    started as the supervisor starts it. Yields (settings, an admin Client, a Store of the
    directory for the bench to read); all stopped and removed afterwards."""
    from state import Store
    from tests.apiserver import Client
    state_dir = temp_dir(prefix)
    settings = settings_for(state_dir)
    services, store = [], None
    try:
        services.append(api_service(settings))
        services += [Service(name, settings, daemon_ready) for name in daemons]
        port = settings["api_port"]
        admin = Client("127.0.0.1", port, login(port, "admin", settings["admin_password"]))
        store = Store(state_dir)
        yield settings, admin, store
    finally:
        if store is not None:
            store.close()
        for service in reversed(services):
            service.stop()
            service.remove_log()
        remove(state_dir)


def login(port, username, password):
    """An access token of the password grant."""
    from tests.apiserver import Client, TOKEN_PATH
    resp = Client("127.0.0.1", port).post(TOKEN_PATH, {
        "grant_type": "password", "username": username, "password": password})
    if resp.status != 200:
        raise RuntimeError(f"login of {username} failed: {resp}")
    return resp.json["access_token"]


def spread(values, fmt="{:.2f}"):
    """min / median / max of values, each formatted with fmt."""
    return " / ".join(fmt.format(v) for v in (min(values), median(values), max(values)))


def quiet_waitress():
    import logging
    # waitress warns about its task queue depth under load: not our measurement
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)


def serve_until_stdin_closes(server, info):
    """Child side: run a Waitress server in a thread, announce it, block on stdin."""
    import threading
    quiet_waitress()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for_parent(info)
    server.close()


def wait_for_parent(info):
    """Child side: tell the parent `info` (one JSON line), then wait until it lets go."""
    print(json.dumps(info), flush=True)
    sys.stdin.read()


def http_get(port, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# ---- load generation --------------------------------------------------------------------

_WRK = None


def wrk_path():
    """wrk, installed from Debian when missing and we are root; None if unavailable."""
    global _WRK
    if _WRK is None:
        path = shutil.which("wrk")
        if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
            note("wrk is missing: apt-get install -y wrk")
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
            if subprocess.call(["apt-get", "install", "-y", "-qq", "wrk"], **quiet) != 0:
                subprocess.call(["apt-get", "update", "-qq"], **quiet)
                subprocess.call(["apt-get", "install", "-y", "-qq", "wrk"], **quiet)
            path = shutil.which("wrk")
        _WRK = path or ""
    return _WRK or None


def tool_name():
    return "wrk" if wrk_path() else "python http.client (fallback)"


def load(url, headers=None, duration=5, connections=16, threads=2):
    """Closed-loop load on one URL. Returns {rps, latency_ms, requests, bad, tool}."""
    if wrk_path():
        return _wrk(url, headers or {}, duration, connections, threads)
    return _python_load(url, headers or {}, duration, connections)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _wrk(url, headers, duration, connections, threads):
    cmd = [wrk_path(), f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency"]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    m = re.search(r"Latency\s+([0-9.]+)(us|ms|s|m)\b", out)
    latency = float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")
    m = re.search(r"^\s*99%\s+([0-9.]+)(us|ms|s|m)\b", out, re.M)
    p99 = float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")
    bad = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if m:
        bad += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        bad += sum(int(x) for x in m.groups())
    return {"rps": rps, "latency_ms": latency, "p99_ms": p99, "requests": requests,
            "bad": bad, "tool": "wrk"}


def _client_worker(args):
    """One process of the fallback: one thread and one keep-alive connection per
    connection asked for, each with one request in flight."""
    import threading
    url, headers, duration, n_conn = args
    parts = urllib.parse.urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    deadline = time.perf_counter() + duration
    totals = []

    def run():
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        count = bad = 0
        latencies = []
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read()
            latencies.append(time.perf_counter() - t0)
            count += 1
            bad += resp.status >= 400
        conn.close()
        totals.append((count, bad, latencies))

    threads = [threading.Thread(target=run) for _ in range(n_conn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (sum(t[0] for t in totals), sum(t[1] for t in totals),
            [x for t in totals for x in t[2]])


def _python_load(url, headers, duration, connections):
    procs = min(connections, max(2, os.cpu_count() or 2))
    per = [connections // procs + (1 if i < connections % procs else 0) for i in range(procs)]
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        results = pool.map(_client_worker, [(url, headers, duration, n) for n in per])
    elapsed = time.perf_counter() - t0
    count = sum(r[0] for r in results)
    latencies = sorted(x for r in results for x in r[2])
    return {"rps": count / elapsed, "latency_ms": sum(latencies) / count * 1000,
            "p99_ms": latencies[int(0.99 * (count - 1))] * 1000, "requests": count, "bad": sum(r[1] for r in results),
            "tool": "python http.client (fallback)"}


def pairs(targets, rounds, seconds, connections):
    """`rounds` rounds of one slice of `seconds` per target in turn (A B A B ...), after a
    1 s warm-up of each, so that bursts of other load on the machine hit every side alike.
    targets: [(label, url, headers, server with cpu_seconds())]. Returns {label: [result
    per slice]}; each result also has `cpu_us`, the server's CPU time per request."""
    out = {label: [] for label, *_ in targets}
    for _, url, headers, _ in targets:
        load(url, headers, duration=1, connections=connections)
    for _ in range(rounds):
        for label, url, headers, server in targets:
            cpu0 = server.cpu_seconds()
            result = load(url, headers, seconds, connections)
            result["cpu_us"] = (server.cpu_seconds() - cpu0) / max(1, result["requests"]) * 1e6
            out[label].append(result)
    return out


def pair_rows(results, labels, first=()):
    """Rows of a pairs() result, one per (label, what), after the cells `first`."""
    return [[*first, what, spread([r["rps"] for r in results[label]], "{:,.0f}"),
             spread([r["p99_ms"] for r in results[label]], "{:.1f}"),
             f"{median([r['cpu_us'] for r in results[label]]):.0f}",
             sum(r["bad"] for r in results[label])] for label, what in labels]


PAIR_HEADERS = ["req/s min / median / max", "p99 ms min / median / max",
                "server CPU us/req (median)", "errors"]


def pair_ratios(results, num, den):
    """num/den of requests/s, one per round (side by side slices)."""
    return [a["rps"] / b["rps"] for a, b in zip(results[num], results[den])]
