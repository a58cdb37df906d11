"""Benchmarks of the appliance: run with `python -m tests.bench [store] [api] [iam]`.

They print figures and never assert timings. Everything here is shared by the bench
modules: timing, tables, the HTTP load generator (wrk, or a Python fallback) and the
child processes that serve while the parent measures.
"""

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
            numeric = not header and re.match(r"^[-+~<>=x.,0-9 %]+$", c) is not None
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
        """User + system CPU time of the child so far (all its threads)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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


def compare(targets, slices=12, slice_seconds=1, connections=16, threads=2, warmup=1):
    """Measure several URLs in short alternating slices (A B A B ...), so that bursts of
    other load on the machine hit them alike. targets: [(label, url, headers, serving
    Child)]. Returns {label: [result per slice]}; each result also has `cpu_us`, the
    server's CPU time per request (user + system, all threads)."""
    results = {label: [] for label, _, _, _ in targets}
    for label, url, headers, _ in targets:
        load(url, headers, duration=warmup, connections=connections, threads=threads)
    for _ in range(slices):
        for label, url, headers, child in targets:
            cpu0 = child.cpu_seconds()
            result = load(url, headers, slice_seconds, connections, threads)
            result["cpu_us"] = (child.cpu_seconds() - cpu0) / max(1, result["requests"]) * 1e6
            results[label].append(result)
    return results


def mean_rps(runs):
    """Requests over time, all slices together."""
    return sum(r["requests"] for r in runs) / sum(r["requests"] / r["rps"] for r in runs)


def best_rps(runs):
    """The least disturbed slice."""
    return max(r["rps"] for r in runs)


def mean_cpu_us(runs):
    return sum(r["cpu_us"] * r["requests"] for r in runs) / sum(r["requests"] for r in runs)


def load_rows(results, labels):
    """Table of compare() results, one row per target."""
    rows = []
    for label, what in labels:
        runs = results[label]
        latency = sum(r["latency_ms"] * r["requests"] for r in runs) / sum(
            r["requests"] for r in runs)
        rows.append([what, f"{mean_rps(runs):,.0f}", f"{best_rps(runs):,.0f}",
                     f"{median([r['rps'] for r in runs]):,.0f}", f"{latency:.2f}",
                     f"{mean_cpu_us(runs):.0f}", sum(r["bad"] for r in runs)])
    headers = ["", "req/s (all slices)", "best slice", "median slice", "avg latency ms",
               "server CPU us/req", "errors"]
    return headers, rows


def ratios(results, num, den):
    """num/den as: all slices together, best slices, median of side-by-side slice pairs,
    and by server CPU time per request."""
    a, b = results[num], results[den]
    return {"all": mean_rps(a) / mean_rps(b), "best": best_rps(a) / best_rps(b),
            "pairs": median([x["rps"] / y["rps"] for x, y in zip(a, b)]),
            "cpu": mean_cpu_us(b) / mean_cpu_us(a)}


def ratio_text(r):
    return (f"{r['all']:.2f} over all slices, {r['best']:.2f} best vs best, "
            f"{r['pairs']:.2f} median of side-by-side pairs, {r['cpu']:.2f} by server CPU "
            "time per request")
