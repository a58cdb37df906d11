"""What the tenancy rules of issues 25 and 26 cost on the request path, side by side.

    python -m tests.bench tenancy

(a) A config created in a project by its owner (the quota check under the project's lock,
    appliance/tenancy/quotas.py; the path-collision lock, appliance/configs/paths.py; the
    targeting check, appliance/tenancy/nodes.py) against the same create in the admin
    project by the admin (no quota), through the real API process. Each side targets a HW
    node of its own project, with a new path every time.
(b) A delete that nothing stands in the way of (a fresh password, created untimed before
    each delete) against a delete refused with 409 because USERS configs link to the
    password (the in-use rule, appliance/api/links.py).
(c) The guarded fetcher (appliance/tenancy/fetch.py, `open_url` with the platform's rule:
    resolve once, check every address, connect to the checked one) against plain
    urllib.request (no proxy), both fetching a small file from `python -m http.server` on
    loopback by the name `localhost`, a new connection each.
(d) The per-address connection guard (appliance/api/connection_guard.py): latency of a
    normal authenticated GET from 127.0.0.1 with no flood against the same GET right after
    FLOOD idle connections were opened from 127.0.0.1 (the guard displaces the longest
    idle ones; an idle one is closed after api_idle_timeout, 10 s, so each flooded slice
    is measured within a few seconds of opening it).

(a)-(c) alternate their sides one request at a time (A B A B ...) and print each side's
min / median / max and the ratio of each side-by-side pair as min / median / max; (d)
alternates slices of GUARD_GETS requests, GUARD_ROUNDS of each, and prints p50 / max.

BENCH_TENANCY_ROUNDS (500: pairs in (a) and (b)), BENCH_TENANCY_USERS (1000),
BENCH_TENANCY_FETCHES (2000), BENCH_TENANCY_FLOOD (1000), BENCH_TENANCY_GUARD_ROUNDS (7)
and BENCH_TENANCY_GUARD_GETS (20) change the sizes. (a) leaves ROUNDS + 1 configs in its
project: past 998 rounds the default quota of 1,000 configs refuses them.
"""

import concurrent.futures
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

from . import appliance, note, remove, spread, table, title

ROUNDS = int(os.environ.get("BENCH_TENANCY_ROUNDS", "500"))
USERS = int(os.environ.get("BENCH_TENANCY_USERS", "1000"))
FETCHES = int(os.environ.get("BENCH_TENANCY_FETCHES", "2000"))
FLOOD = int(os.environ.get("BENCH_TENANCY_FLOOD", "1000"))
GUARD_ROUNDS = int(os.environ.get("BENCH_TENANCY_GUARD_ROUNDS", "7"))
GUARD_GETS = int(os.environ.get("BENCH_TENANCY_GUARD_GETS", "20"))
ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
C, N, P = "/v1/config/configs", "/v1/compute/nodes", "/v1/secret/passwords"


def created(resp):
    if resp.status != 201:
        raise RuntimeError(f"create failed: {resp}")
    return resp.json


def expect(resp, status):
    if resp.status != status:
        raise RuntimeError(f"expected {status}, got {resp}")
    return resp


def hw_node(admin, project):
    return created(admin.post(N, {"name": f"hw-{uuid.uuid4().hex[:6]}", "project_id": project,
                                  "cores": 1, "ram": 1024, "node_type": "HW"}))["uuid"]


def project_owner(admin, port):
    """(project uuid, a Client of a user bound as owner there, its token scoped to it)."""
    from tests.apiserver import Client, TOKEN_PATH
    project = created(admin.post("/v1/iam/projects", {"name": f"bench-{uuid.uuid4().hex[:8]}"}))
    name, password = f"u{uuid.uuid4().hex[:10]}", "a-good-password"
    user = created(admin.post("/v1/iam/users", {"username": name, "password": password}))
    role = admin.get("/v1/iam/roles", query={"name": "owner"}).json[0]["uuid"]
    created(admin.post("/v1/iam/role_bindings", {"user": user["uuid"], "role": role,
                                                 "project": project["uuid"]}))
    resp = Client("127.0.0.1", port).post(TOKEN_PATH, {
        "grant_type": "password", "username": name, "password": password,
        "scope": f"project:{project['uuid']}"})
    if resp.status != 200:
        raise RuntimeError(f"login of the owner failed: {resp}")
    return project["uuid"], Client("127.0.0.1", port, resp.json["access_token"])


def config_body(project, node, path, **body):
    return {"name": f"c-{uuid.uuid4().hex[:8]}", "project_id": project, "path": path,
            "target": {"kind": "node", "node": node},
            "body": body or {"kind": "text", "content": "bench\n"}}


def alternate(a, b, rounds):
    """Seconds of a() and b(), called in turn `rounds` times each, after one warm-up
    call of each."""
    a()
    b()
    times_a, times_b = [], []
    for _ in range(rounds):
        for fn, out in ((a, times_a), (b, times_b)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return times_a, times_b


def compared(rows, what, label_a, times_a, label_b, times_b, scale=1000.0, fmt="{:.2f}"):
    """Rows of two sides and the ratio b/a per pair."""
    rows.append([what, label_a, spread([t * scale for t in times_a], fmt), ""])
    rows.append(["", label_b, spread([t * scale for t in times_b], fmt),
                 spread([b / a for a, b in zip(times_a, times_b)])])


# ---- (a) and (b): through the API --------------------------------------------------------

def bench_create(admin, owner, project, rows):
    project_node, admin_node = hw_node(admin, project), hw_node(admin, ADMIN_PROJECT)
    count = iter(range(10 ** 9))

    def in_admin():
        created(admin.post(C, config_body(ADMIN_PROJECT, admin_node,
                                          f"/etc/bench/a{next(count)}")))

    def in_project():
        created(owner.post(C, config_body(project, project_node,
                                          f"/etc/bench/p{next(count)}")))

    t_admin, t_project = alternate(in_admin, in_project, ROUNDS)
    compared(rows, "(a) config POST", "admin project, admin token", t_admin,
             "a project, its owner's token", t_project)


def bench_delete(admin, rows):
    node = hw_node(admin, ADMIN_PROJECT)
    used = created(admin.post(P, {"name": "bench-used", "project_id": ADMIN_PROJECT}))
    link = f"$core.secret.passwords.${used['uuid']}:value"
    t0 = time.perf_counter()

    def linked(i):
        created(admin.post(C, config_body(
            ADMIN_PROJECT, node, f"/etc/bench/linked-{i}.conf", kind="template",
            template="password={{ pw }}\n", variables={"pw": link})))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(linked, range(USERS)))
    note(f"(b) {USERS} configs linking one password created in "
         f"{time.perf_counter() - t0:.0f} s (4 clients)")
    pending = []

    def prepare():
        pending.append(created(admin.post(P, {"name": f"free-{uuid.uuid4().hex[:8]}",
                                              "project_id": ADMIN_PROJECT}))["uuid"])

    def free_delete():
        expect(admin.delete(f"{P}/{pending.pop()}"), 204)

    def refused_delete():
        expect(admin.delete(f"{P}/{used['uuid']}"), 409)

    # the free side's record is made before its pair, outside the timing
    t_free, t_used = [], []
    prepare()
    free_delete()
    t0 = time.perf_counter()
    refused_delete()            # the first since the configs changed: builds the index
    note(f"(b) the first refused DELETE after the {USERS} configs were written: "
         f"{(time.perf_counter() - t0) * 1000:.1f} ms")
    for _ in range(ROUNDS):
        prepare()
        for fn, out in ((free_delete, t_free), (refused_delete, t_used)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    compared(rows, "(b) password DELETE", "nothing links to it: 204", t_free,
             f"{USERS} configs link to it: 409", t_used)


# ---- (c) the guarded fetcher -------------------------------------------------------------

def bench_fetch(rows):
    from appliance.tenancy.addresses import PLATFORM
    from appliance.tenancy.fetch import open_url
    from tests.apiserver import free_port
    base = tempfile.mkdtemp(prefix="bench-tenancy-fetch-")
    body = os.urandom(4096)
    with open(os.path.join(base, "small.bin"), "wb") as f:
        f.write(body)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                               "--directory", base, str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("python -m http.server did not start") from None
                time.sleep(0.05)
        url = f"http://localhost:{port}/small.bin"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def plain():
            with opener.open(url, timeout=30) as resp:
                if resp.read() != body:
                    raise RuntimeError("urllib: wrong body")

        def guarded():
            with open_url(url, PLATFORM, max_bytes=1 << 20, deadline_seconds=30) as resp:
                if resp.read() != body:
                    raise RuntimeError("open_url: wrong body")

        t_plain, t_guarded = alternate(plain, guarded, FETCHES)
    finally:
        from tests import processes
        processes.stop(server)
        remove(base)
    compared(rows, "(c) GET 4 KiB, localhost", "urllib.request", t_plain,
             "open_url, platform rule", t_guarded)


# ---- (d) the per-address connection guard ------------------------------------------------

def open_flood(port, count):
    """`count` idle connections to the API from 127.0.0.1 (connected, nothing sent)."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


def still_open(socks):
    """How many of `socks` the server has not closed (nothing to read and no EOF)."""
    alive = 0
    for s in socks:
        try:
            s.recv(1, socket.MSG_PEEK)      # EOF, or the guard's 429: closed
        except BlockingIOError:
            alive += 1                      # nothing to read yet: still open
        except OSError:
            pass
    return alive


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def bench_guard(admin, port):
    users = expect(admin.get("/v1/iam/users"), 200).json
    path = "/v1/iam/users/" + next(u["uuid"] for u in users if u["username"] == "admin")
    expect(admin.get(path), 200)
    quiet, flooded, kept, opened = [], [], [], []

    def gets():
        out = []
        for _ in range(GUARD_GETS):
            t0 = time.perf_counter()
            expect(admin.get(path), 200)
            out.append(time.perf_counter() - t0)
        return out

    for _ in range(GUARD_ROUNDS):
        quiet.append(gets())
        t0 = time.perf_counter()
        socks = open_flood(port, FLOOD)
        time.sleep(0.5)                 # let the server accept (and displace) them
        opened.append(time.perf_counter() - t0)
        try:
            flooded.append(gets())
            kept.append(still_open(socks))
        finally:
            for s in socks:
                s.close()
        time.sleep(0.5)                 # let the server see them close

    def row(label, slices):
        flat = [t for s in slices for t in s]
        return [label, f"{pct(flat, 50) * 1000:.2f}", f"{max(flat) * 1000:.2f}",
                spread([pct(s, 50) * 1000 for s in slices])]

    table(["(d) GET /v1/iam/users/<admin> from 127.0.0.1", "p50 ms", "max ms",
           "p50 per slice ms min / median / max"],
          [row("no flood", quiet),
           row(f"{FLOOD} idle connections from 127.0.0.1", flooded)])
    note(f"ratio flooded/quiet of the p50 per pair of slices: "
         f"{spread([pct(f, 50) / pct(q, 50) for q, f in zip(quiet, flooded)])}; "
         f"{GUARD_ROUNDS} pairs of {GUARD_GETS} GETs; flood connections still open after "
         f"the GETs: {spread(kept, '{:.0f}')} of {FLOOD} (api_connections_per_address "
         f"100); opening + 0.5 s: {spread(opened)} s")


def main():
    title(f"bench_tenancy: the tenancy rules on the request path ({ROUNDS} pairs, "
          f"{USERS} linking configs, {FETCHES} fetch pairs, a flood of {FLOOD})")
    rows = []
    with appliance("tenancy") as (settings, admin, _store):
        port = settings["api_port"]
        project, owner = project_owner(admin, port)
        bench_create(admin, owner, project, rows)
        bench_delete(admin, rows)
        bench_fetch(rows)
        table(["measure", "side", "ms min / median / max", "ratio 2nd/1st per pair min / median / max"],
              rows)
        bench_guard(admin, port)


if __name__ == "__main__":
    main()
