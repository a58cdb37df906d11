"""Memory of the whole appliance after one use of every capability and an idle period,
the first use of an idle capability, and the API after a workload.

    python -m tests.bench memory
    BENCH_MEMORY_ROUNDS=1 BENCH_MEMORY_IDLE=90 BENCH_MEMORY_REQUESTS=0 python -m tests.bench memory

Each run starts `appliance up` (the console script of this venv, as `make run` does) in a
fresh temporary state directory on free loopback ports, then (issue 32's scenario):
1. uses every capability once through the API (USES: a secret, a password and an SSH key
   for the delivery daemon, a DNS domain and record, a certificate, a repository for the
   builder, a config on the development node for the status daemon, a project and a
   variable), and waits until each has left NEW or IN_PROGRESS (whatever it ends in: the
   certificate has no zone and the repository nothing to read, both ERROR);
2. waits IDLE seconds (BENCH_MEMORY_IDLE, 600 by default: the issue's "10 idle minutes",
   well past the on-demand daemons' 60 s idle stop, docs/on-demand-daemons.md);
3. reads /proc/<pid>/smaps_rollup of the supervisor and of every process below it, SAMPLES
   times 1 s apart: RSS and PSS per process and their sums (PSS splits each shared page
   among every process that maps it, the appliance's or not: the sum is what the
   appliance costs only when nothing else maps the same files; other processes of this
   venv or interpreter beside it, a CI or a BENCH_MEMORY_BEFORE tree, lower it:
   docs/supervisor.md, "PSS counts who else maps the files");
4. times the first use of an idle capability: from a secret's POST to its ACTIVE (the
   delivery daemon has had nothing to do for IDLE seconds), polled every 10 ms;
5. drives REQUESTS requests at the API from CLIENTS keep-alive connections (a mix of
   token, list, get and create calls, see WORKLOAD) and prints the API process's RSS,
   PSS and peak RSS (0: skipped).

"after" is this tree. With BENCH_MEMORY_BEFORE=<git ref> the tree of that ref is the
"before" side (`git archive <ref>`, extracted to a temp directory and run with this venv's
python, its tree first on PYTHONPATH). The two sides of a round run at the same time, side
by side (the same load, and half the wall time of 10 idle minutes each); ROUNDS rounds,
every figure printed as min / median / max.
Goals: issue 32, after one use of every capability and 10 idle minutes, total PSS <= 100 MB
and the first use of an idle capability < 1 s; issue 11, API RSS < 100 MB after 10,000
requests.
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
# issue 32's goal is read after 10 idle minutes
IDLE_SECONDS = float(os.environ.get("BENCH_MEMORY_IDLE", "600"))
REQUESTS = int(os.environ.get("BENCH_MEMORY_REQUESTS", "10000"))
CLIENTS = 8                   # the API's thread count is 8: every worker thread gets work
PASSWORD = os.environ.get("BENCH_MEMORY_PASSWORD", "bench-memory-password")
GOAL_IDLE_PSS_MB = 100          # issue 32: after one use of every capability
GOAL_FIRST_USE_SECONDS = 1.0    # issue 32: the first use of an idle capability
GOAL_API_RSS_MB = 100
ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


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


def get_token(conn, password=PASSWORD):
    status, raw = request(conn, "POST", "/v1/iam/clients/default/actions/get_token/invoke",
                          {"grant_type": "password", "username": "admin",
                           "password": password})
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


# ---- one use of every capability, and the first use of an idle one -------------------

SETTLED = ("ACTIVE", "ERROR", "AVAILABLE", "FAILED", "DELETED")


def uses(node):
    """(what, collection path, body) of one use of every capability; `node` is the
    development node's uuid (the config goes there, through the status daemon)."""
    project = ADMIN_PROJECT
    return [
        ("secret", "/v1/secret/secrets", {"name": "bench-secret", "project_id": project,
                                          "constructor": {"kind": "plain"}, "value": "v"}),
        ("password", "/v1/secret/passwords", {"name": "bench-password", "project_id": project}),
        ("ssh key", "/v1/secret/ssh_keys", {"name": "bench-ssh", "project_id": project}),
        ("dns domain", "/v1/dns/domains", {"name": "bench-memory.test", "project_id": project}),
        ("certificate", "/v1/secret/certificates", {
            "name": "bench-cert", "project_id": project,
            "domains": ["www.no-zone-bench.test"]}),
        ("repository", "/v1/repo/repositories", {
            "name": "bench-repo", "project_id": project, "sync_mode": "lazy",
            "driver_spec": {"kind": "nginx", "url": "http://127.0.0.1:9/"}}),
        ("config", "/v1/config/configs", {
            "name": "bench-config", "project_id": project, "path": "/etc/bench-memory.conf",
            "target": {"kind": "node", "node": node},
            "body": {"kind": "text", "content": "bench\n"}}),
        ("project", "/v1/iam/projects", {"name": "bench-memory-use"}),
    ]


def wait_settled(conn, token, path, timeout=120):
    """The status a record settles in (not NEW / IN_PROGRESS), or the last one seen."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        code, raw = request(conn, "GET", path, token=token)
        status = json.loads(raw).get("status") if code == 200 else f"HTTP {code}"
        if status is None or status in SETTLED:
            return status
        time.sleep(0.05)
    return status


def use_every_capability(port, connect=None, password=PASSWORD, node_name="dev-node"):
    """One use of each (uses()); {what: the status it settled in}. `connect()`: another
    connection than plain HTTP to `port` (bench_boot's HTTPS to the image); `node_name`
    None: the first node (the image's own, which first boot registers)."""
    conn = connect() if connect else http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        token = get_token(conn, password)
        deadline = time.monotonic() + 120
        node = None
        while node is None and time.monotonic() < deadline:
            _, raw = request(conn, "GET", "/v1/compute/nodes", token=token)
            node = next((n["uuid"] for n in json.loads(raw)
                         if node_name is None or n.get("name") == node_name), None)
            if node is None:
                time.sleep(0.5)
        outcome = {}
        for what, path, body in uses(node):
            status, raw = request(conn, "POST", path, body, token=token)
            if status != 201:
                outcome[what] = f"HTTP {status}: {raw[:120]!r}"
                continue
            made = json.loads(raw)
            # a record without a status (a domain) is done once created
            outcome[what] = wait_settled(conn, token, f"{path}/{made['uuid']}") or "created"
            if what == "dns domain":
                status, raw = request(conn, "POST", f"{path}/{made['uuid']}/records", {
                    "type": "A", "record": {"kind": "A", "name": "www",
                                            "address": "192.0.2.1"}}, token=token)
                outcome["dns record"] = "created" if status == 201 else f"HTTP {status}"
        return outcome
    finally:
        conn.close()


def first_use_seconds(port):
    """From a secret's POST to its ACTIVE (GET every 10 ms): the first use of the delivery
    daemon after the idle period."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        token = get_token(conn)
        started = time.perf_counter()
        status, raw = request(conn, "POST", "/v1/secret/secrets", {
            "name": "bench-first-use", "project_id": ADMIN_PROJECT,
            "constructor": {"kind": "plain"}, "value": "v"}, token=token)
        if status != 201:
            raise RuntimeError(f"secret POST: {status} {raw[:200]!r}")
        path = f"/v1/secret/secrets/{json.loads(raw)['uuid']}"
        while time.perf_counter() - started < 60:
            _, raw = request(conn, "GET", path, token=token)
            if json.loads(raw).get("status") == "ACTIVE":
                return time.perf_counter() - started
            time.sleep(0.01)
        raise RuntimeError("the first secret after the idle period: not ACTIVE in 60 s")
    finally:
        conn.close()


# ---- one round and the report ---------------------------------------------------------

def sample(app):
    """{name: (rss, pss)} in kB over the appliance's processes (same names summed)."""
    totals = {}
    for pid, name in app.processes().items():
        mem = memory_of(pid)
        if mem is not None:
            rss, pss = totals.get(name, (0, 0))
            totals[name] = (rss + mem[0], pss + mem[1])
    return totals


def one_round(sides):
    """Every side's appliance at once: uses, idle, samples, first use, load. Per side:
    {"samples": [{name: (rss, pss)}, ...] in kB, "outcome": {use: status}, "first_use":
    seconds, "loaded": the API's (rss, pss, hwm) after the load or None, "seconds",
    "counts"}."""
    apps = {name: Appliance(tree) for name, tree in sides}
    results = {name: {} for name, _ in sides}
    try:
        for name, app in apps.items():
            app.wait_ready()
        for name, app in apps.items():
            results[name]["outcome"] = use_every_capability(app.api_port)
        time.sleep(max(IDLE_SECONDS - SAMPLES + 1, 0))
        for name in apps:
            results[name]["samples"] = []
        for n in range(SAMPLES):
            if n:
                time.sleep(1)
            for name, app in apps.items():
                results[name]["samples"].append(sample(app))
        for name, app in apps.items():
            results[name]["first_use"] = first_use_seconds(app.api_port)
        for name, app in apps.items():
            result = results[name]
            result["loaded"], result["seconds"], result["counts"] = None, 0.0, {}
            if REQUESTS:
                api_pid = next(p for p, n in app.processes().items() if n == "api")
                result["seconds"], result["counts"] = drive(app.api_port, REQUESTS)
                result["loaded"] = memory_of(api_pid)
    finally:
        for name, app in apps.items():
            for line in app.stop()[:5]:
                note(f"  {name} log: {line}")
    return results


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
    title(f"bench_memory: `appliance up`, one use of every capability, idle "
          f"{IDLE_SECONDS:.0f} s, the first use of an idle capability, then {REQUESTS} API "
          f"requests ({ROUNDS} rounds, MB as min / median / max)")
    ref = os.environ.get("BENCH_MEMORY_BEFORE")
    before = before_tree(ref)
    sides = [("before", before), ("after", ROOT)] if before else [("after", ROOT)]
    if before:
        note(f"before: the tree of {ref}; after: this tree; side by side in each round")
    results = {name: [] for name, _ in sides}
    try:
        for round_ in range(ROUNDS):
            for name, result in one_round(sides).items():
                results[name].append(result)
                last = result["samples"][-1]
                note(f"round {round_ + 1} {name}: PSS {mb(sum(p for _, p in last.values()))}"
                     f" MB, RSS {mb(sum(r for r, _ in last.values()))} MB over {len(last)} "
                     f"processes; first use {result['first_use']:.3f} s; uses "
                     f"{result['outcome']}")
                if result["loaded"]:
                    note(f"  {sum(result['counts'].values())} requests in "
                         f"{result['seconds']:.1f} s, statuses "
                         f"{dict(sorted(result['counts'].items()))}; API RSS "
                         f"{mb(result['loaded'][0])} MB")
    finally:
        if before:
            remove(before)
    for name, _ in sides:
        runs = results[name]
        samples = [s for run in runs for s in run["samples"]]
        note(f"\n{name}: per process after one use of every capability and {IDLE_SECONDS:.0f} s"
             f" idle, {len(samples)} samples (MB, min / median / max)")
        names = sorted({n for s in samples for n in s},
                       key=lambda n: (n != "supervisor", n != "api", n))
        rows = [[n, triple([s[n][0] for s in samples if n in s]),
                 triple([s[n][1] for s in samples if n in s]),
                 f"{sum(1 for s in samples if n in s)}/{len(samples)}"] for n in names]
        rows.append(["total", triple([sum(r for r, _ in s.values()) for s in samples]),
                     triple([sum(p for _, p in s.values()) for s in samples]), ""])
        table(["process", "RSS", "PSS", "in samples"], rows)
        firsts = [run["first_use"] for run in runs]
        note(f"{name}: first use of an idle capability (a secret's POST to ACTIVE): "
             f"{min(firsts):.3f} / {median(firsts):.3f} / {max(firsts):.3f} s")
        loaded = [run["loaded"] for run in runs if run["loaded"]]
        if loaded:
            note(f"{name}: API after {REQUESTS} requests: RSS {triple([l[0] for l in loaded])}"
                 f", PSS {triple([l[1] for l in loaded])}, peak RSS "
                 f"{triple([l[2] for l in loaded])}")
    note(f"goals: total PSS <= {GOAL_IDLE_PSS_MB} MB after one use of every capability and "
         f"10 idle minutes; first use of an idle capability < {GOAL_FIRST_USE_SECONDS:.0f} s;"
         f" API RSS < {GOAL_API_RSS_MB} MB after {REQUESTS or 10000} requests")
