"""Memory of the whole appliance, idle and after a workload.

    python -m tests.bench memory
    BENCH_MEMORY_ROUNDS=1 BENCH_MEMORY_IDLE=30 python -m tests.bench memory

Each run starts `appliance up` (the console script of this venv, as `make run` does) in a
fresh temporary state directory on free loopback ports, waits IDLE seconds, then reads
/proc/<pid>/smaps_rollup of the supervisor and of every process below it: RSS and PSS
per process and their sums (PSS splits each shared page among the processes that map
it, so the sum is what the appliance really costs). Then it drives REQUESTS requests at
the API from CLIENTS keep-alive connections (a mix of token, list, get and create calls,
see WORKLOAD) and prints the API process's RSS, PSS and peak RSS.

"after" is this tree. With BENCH_MEMORY_BEFORE=<git ref> the tree of that ref is the
"before" side (`git archive <ref>`, extracted to a temp directory and run with this venv's
python, its tree first on PYTHONPATH), and the two sides alternate. ROUNDS runs each, every
figure printed as min / median / max.
Goals (issue 11): idle total PSS < 150 MB; API RSS < 100 MB after 10,000 requests.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

from tests import processes
from tests import ports

from . import ROOT, median, note, remove, table, temp_dir, title

ROUNDS = int(os.environ.get("BENCH_MEMORY_ROUNDS", "2"))
SAMPLES = 5                   # idle readings per run, 1 s apart
IDLE_SECONDS = float(os.environ.get("BENCH_MEMORY_IDLE", "30"))
REQUESTS = int(os.environ.get("BENCH_MEMORY_REQUESTS", "10000"))
CLIENTS = 8                   # the API's thread count is 8: every worker thread gets work
PASSWORD = os.environ.get("BENCH_MEMORY_PASSWORD", "bench-memory-password")
GOAL_IDLE_PSS_MB = 150
GOAL_API_RSS_MB = 100


# ---- processes ------------------------------------------------------------------------

def free_port(kind=socket.SOCK_STREAM):
    return ports.free_port(kind=kind)


def memory_of(pid):
    """(rss, pss, hwm) in kB of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            rollup = dict(line.split()[:2] for line in f if line.split()[0].endswith(":"))
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split()[:2] for line in f if line.startswith("VmHWM"))
    except (OSError, ValueError):
        return None
    return int(rollup["Rss:"]), int(rollup["Pss:"]), int(status.get("VmHWM:", 0))


def descendants(root):
    """{pid: name} of `root` and every process below it; name is the module it runs."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [root], [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, ppid in parents.items() if ppid == pid]
        found += kids
        todo += kids
    return {pid: process_name(pid, pid == root) for pid in found}


def process_name(pid, is_root):
    """A child started by `python -m MODULE` is named by its module; one forked by the
    supervisor has the supervisor's command line, and its name in /proc/<pid>/comm."""
    if is_root:
        return "supervisor"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        return "?"
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
    if module in (None, "appliance.supervisor"):
        return comm
    return {"appliance.server": "api"}.get(module, module.rsplit(".", 1)[-1])


class Appliance:
    """`appliance up` from `tree`, in its own state directory, until stop()."""

    def __init__(self, tree):
        self.tree = tree
        self.state_dir = temp_dir("memory")
        self.api_port = free_port()
        self.dns_port = free_port()
        env = dict(os.environ, APPLIANCE_ADMIN_PASSWORD=PASSWORD,
                   PYTHONPATH=tree, APPLIANCE_LOG_LEVEL="WARNING")
        env.pop("APPLIANCE_CONFIG", None)
        # the venv's console script, which `make run` runs; PYTHONPATH picks the tree
        script = os.path.join(os.path.dirname(sys.executable), "appliance")
        self.process = subprocess.Popen(
            [script, "up", "--state-dir", os.path.join(self.state_dir, "var"),
             "--api-port", str(self.api_port), "--dns-port", str(self.dns_port)],
            cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        self._errors = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.process.stderr:
            if b" ERROR " in line or b"Traceback" in line:
                self._errors.append(line.decode(errors="replace").rstrip())

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"appliance up exited {self.process.returncode}")
            try:
                status, _ = request(http.client.HTTPConnection("127.0.0.1", self.api_port,
                                                               timeout=2), "GET", "/v1/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the API did not answer /v1/health")

    def processes(self):
        return descendants(self.process.pid)

    def stop(self):
        processes.stop(self.process, 20)
        remove(self.state_dir)
        return self._errors


# ---- the workload ---------------------------------------------------------------------

def request(conn, method, path, body=None, token=None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def get_token(conn):
    status, raw = request(conn, "POST", "/v1/iam/clients/default/actions/get_token/invoke",
                          {"grant_type": "password", "username": "admin",
                           "password": PASSWORD})
    if status != 200:
        raise RuntimeError(f"login failed: {status} {raw[:200]!r}")
    return json.loads(raw)["access_token"]


def created_uuid(status, raw):
    return json.loads(raw)["uuid"] if status in (200, 201) else None


# One cycle of CYCLE requests per client: a login (a scrypt of 16 MB: the API's biggest
# allocation), then twice three lists, four gets and two creates (so about 2,000 new
# records over 10,000 requests: a store that grows as it does in use).
CYCLE = 19


def client_cycle(conn, client, i, state):
    token = get_token(conn)
    statuses = [200]
    project = state["project"]
    for half in range(2):
        for path in ("/v1/iam/users", "/v1/iam/projects?page_limit=50",
                     f"/v1/secret/passwords?project_id={project}"):
            statuses.append(request(conn, "GET", path, token=token)[0])
        for path in (f"/v1/iam/users/{state['admin']}", f"/v1/iam/projects/{project}",
                     f"/v1/iam/projects/{state['mine'][-1]}", "/v1/vs/variables"):
            statuses.append(request(conn, "GET", path, token=token)[0])
        status, raw = request(conn, "POST", "/v1/iam/projects",
                              {"name": f"bench-{client}-{i}-{half}", "description": "x" * 64},
                              token=token)
        statuses.append(status)
        state["mine"].append(created_uuid(status, raw) or project)
        statuses.append(request(conn, "POST", "/v1/secret/passwords",
                                {"name": f"s-{client}-{i}-{half}", "project_id": project},
                                token=token)[0])
    return statuses


def drive(port, total):
    """`total` requests from CLIENTS threads; returns (seconds, {status: count})."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    token = get_token(conn)
    _, raw = request(conn, "GET", "/v1/iam/users?username=admin", token=token)
    admin = json.loads(raw)[0]["uuid"]
    status, raw = request(conn, "POST", "/v1/iam/projects", {"name": "bench-memory"},
                          token=token)
    project = created_uuid(status, raw)
    conn.close()
    counts, lock = {}, threading.Lock()
    cycles = -(-total // (CYCLE * CLIENTS))       # rounded up: at least `total` requests

    def client(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        state = {"admin": admin, "project": project, "mine": [project]}
        try:
            for i in range(cycles):
                for s in client_cycle(c, n, i, state):
                    with lock:
                        counts[s] = counts.get(s, 0) + 1
        finally:
            c.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, counts


# ---- one run and the report -----------------------------------------------------------

def one_run(tree):
    """Idle samples [{name: (rss, pss)}, ...] in kB, the API's (rss, pss, hwm) after the
    load, the seconds the load took and the count of each HTTP status."""
    app = Appliance(tree)
    try:
        app.wait_ready()
        time.sleep(max(IDLE_SECONDS - SAMPLES + 1, 0))
        samples = []              # per sample: {name: (rss, pss)}
        for sample in range(SAMPLES):
            if sample:
                time.sleep(1)
            totals = {}
            for pid, name in app.processes().items():
                mem = memory_of(pid)
                if mem is not None:
                    rss, pss = totals.get(name, (0, 0))
                    totals[name] = (rss + mem[0], pss + mem[1])
            samples.append(totals)
        api_pid = next(p for p, n in app.processes().items() if n == "api")
        seconds, counts = drive(app.api_port, REQUESTS)
        loaded = memory_of(api_pid)
    finally:
        errors = app.stop()
    for line in errors[:5]:
        note(f"  log: {line}")
    return samples, loaded, seconds, counts


def before_tree(ref):
    """The tree of git ref `ref`, extracted read-only; None when there is none."""
    if not ref:
        return None
    target = temp_dir("memory-before")
    archive = subprocess.run(["git", "-C", ROOT, "archive", ref], capture_output=True)
    if archive.returncode != 0:
        remove(target)
        raise RuntimeError(f"BENCH_MEMORY_BEFORE={ref}: git archive failed: "
                           f"{archive.stderr.decode(errors='replace')}")
    subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return target


def mb(kb):
    return f"{kb / 1024:.1f}"


def triple(values):
    return f"{mb(min(values))} / {mb(median(values))} / {mb(max(values))}"


def main():
    title(f"bench_memory: `appliance up` idle {IDLE_SECONDS:.0f} s, then {REQUESTS} "
          f"API requests ({ROUNDS} rounds, MB as min / median / max)")
    ref = os.environ.get("BENCH_MEMORY_BEFORE")
    before = before_tree(ref)
    sides = [("before", before), ("after", ROOT)] if before else [("after", ROOT)]
    if before:
        note(f"before: the tree of {ref}; after: this tree; alternated")
    results = {name: [] for name, _ in sides}
    try:
        for round_ in range(ROUNDS):
            for name, tree in sides:
                samples, loaded, seconds, counts = one_run(tree)
                results[name].append((samples, loaded))
                last = samples[-1]
                note(f"round {round_ + 1} {name}: idle PSS {mb(sum(p for _, p in last.values()))}"
                     f" MB over {len(last)} processes; {sum(counts.values())} requests in "
                     f"{seconds:.1f} s, statuses {dict(sorted(counts.items()))}; API RSS "
                     f"{mb(loaded[0])} MB")
    finally:
        if before:
            remove(before)
    for name, _ in sides:
        runs = results[name]
        samples = [sample for run_samples, _ in runs for sample in run_samples]
        note(f"\n{name}: per process after {IDLE_SECONDS:.0f} s idle, {len(samples)} samples"
             f" (MB, min / median / max)")
        names = sorted({n for sample in samples for n in sample},
                       key=lambda n: (n != "supervisor", n != "api", n))
        rows = [[n, triple([s[n][0] for s in samples if n in s]),
                 triple([s[n][1] for s in samples if n in s])] for n in names]
        rows.append(["total", triple([sum(r for r, _ in s.values()) for s in samples]),
                     triple([sum(p for _, p in s.values()) for s in samples])])
        table(["process", "RSS", "PSS"], rows)
        note(f"{name}: API after {REQUESTS} requests: RSS {triple([l[0] for _, l in runs])}, "
             f"PSS {triple([l[1] for _, l in runs])}, peak RSS {triple([l[2] for _, l in runs])}")
    note(f"goals: idle total PSS < {GOAL_IDLE_PSS_MB} MB; API RSS < {GOAL_API_RSS_MB} MB "
         f"after {REQUESTS} requests")
