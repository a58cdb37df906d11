"""Long-lived connections on the API's event loop (docs/long-lived.md, issue 29).

    python -m tests.bench longlived

The API runs in its own process (the production server, appliance/server.py, with the
test capability of tests/agent/testcap.py and the shipped thread count). Printed:
- an authenticated GET (one node by uuid, one keep-alive connection, GETS in a row):
  its p50 and p99 with no long-lived connection open, and with AGENTS payload long polls
  (one per agent, each with its own token) and STREAMS event-stream clients open; the
  sides alternate ROUNDS times (none, open, none, open, ...), min / median / max of the
  per-round figures, and the ratio open / none of each pair's p99 (goal <= 1.5x);
- a config change (one record that targets every agent's node) until all AGENTS polls
  have answered with the new payload, and an event (a project created) until all STREAMS
  clients have it: min / median / max over the rounds; beside the change's time, the CPU
  seconds the API process spent on it (less swayed by a busy machine than the time);
- the API's RSS with nothing open and with every connection open.
Figures are printed, never asserted.
"""

import http.client
import os
import statistics
import time

from tests.raw_http import opened, read_all

from . import note, remove, settings_for, spread, table, temp_dir, title
from .bench_agent import start_api, stop_api
from .bench_memory import memory_of

AGENTS = int(os.environ.get("BENCH_LONGLIVED_AGENTS", "1000"))
STREAMS = int(os.environ.get("BENCH_LONGLIVED_STREAMS", "100"))
ROUNDS = int(os.environ.get("BENCH_LONGLIVED_ROUNDS", "3"))
GETS = int(os.environ.get("BENCH_LONGLIVED_GETS", "400"))
ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def gets(port, path, token):
    """(p50, p99) in ms of GETS authenticated GETs on one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    try:
        for _ in range(GETS):
            t0 = time.perf_counter()
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            resp.read()
            times.append(time.perf_counter() - t0)
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: {resp.status}")
    finally:
        conn.close()
    return pct(times, 50) * 1000, pct(times, 99) * 1000


def until_all(socks, done, timeout=300):
    """Read every socket until done(its bytes) holds; returns when the last one does."""
    got, left = read_all(socks, done, timeout)
    if left:
        raise RuntimeError(f"{len(left)} connections got nothing in {timeout} s")
    return got


def cpu_seconds(pid):
    """User + system CPU seconds the process has used (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def long_lived_open(port, token):
    """The API's own count of its open long-lived connections (GET /metrics)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("appliance_api_long_lived_connections{"))


def measure(agents_count, streams_count, rounds):
    """The figures of `rounds` rounds with `agents_count` payload long polls and
    `streams_count` event streams open on one API process (its own, started and stopped
    here): a dict of lists, one value per round (tests/bench/bench_scale.py reuses it)."""
    from appliance.agent.credentials import issue_credential
    from state import Store
    from tests.agent import testcap
    from tests.apiserver import Client
    from . import login
    state_dir = temp_dir("bench-longlived")
    # every connection comes from 127.0.0.1, as in the image, where nginx is the API's only
    # address and the per-address cap is off (docs/server.md)
    settings = settings_for(state_dir, log_level="WARNING", api_connections_per_address=0)
    api, log = start_api(settings)
    port = settings["api_port"]
    store = Store(state_dir)
    out = {key: [] for key in ("none", "open", "ratios", "fanout_polls", "fanout_cpu",
                               "fanout_events", "rss_none", "rss_open")}
    try:
        admin_token = login(port, "admin", settings["admin_password"])
        client = Client("127.0.0.1", port)
        nodes = store.collection("compute_nodes")
        agents = []
        for i in range(agents_count):
            node = nodes.insert({"name": f"bench-ll-{i}", "node_type": "HW",
                                 "project_id": ADMIN_PROJECT, "status": "ACTIVE"})
            cred = issue_credential(store, node["uuid"])
            token = client.post("/v1/iam/clients/default/actions/get_token/invoke", {
                "grant_type": "client_credentials", "client_id": cred["agent"],
                "client_secret": cred["secret"]}).json["access_token"]
            agents.append((cred["agent"], node["uuid"], token))
        probe = f"/v1/compute/nodes/{agents[0][1]}"
        masters = store.collection(testcap.MASTER_KIND)
        for n in range(rounds):
            out["none"].append(gets(port, probe, admin_token))
            out["rss_none"].append(memory_of(api.pid)[0])
            hashes = {}
            for agent, _, token in agents:
                hashes[agent] = client.with_token(token).get(
                    f"/v1/ua/agents/{agent}/payload").json["hash"]
            polls = [opened(port, f"/v1/ua/agents/{agent}/payload?hash={hashes[agent]}"
                                  f"&wait=30", token, timeout=60)
                     for agent, _, token in agents]
            streams = [opened(port, "/v1/events", admin_token, "text/event-stream", timeout=60)
                       for _ in range(streams_count)]
            deadline = time.monotonic() + 60
            while long_lived_open(port, admin_token) < agents_count and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(0.5)
            out["open"].append(gets(port, probe, admin_token))
            out["rss_open"].append(memory_of(api.pid)[0])
            out["ratios"].append(out["open"][-1][1] / out["none"][-1][1])
            # a config change for every agent
            t0, cpu0 = time.perf_counter(), cpu_seconds(api.pid)
            masters.insert({"target": {"kind": "nodes", "nodes": [a[1] for a in agents]},
                            "path": f"/etc/bench-{n}.conf", "content": f"v{n}"})
            until_all(polls, lambda b: b"\r\n\r\n" in b and b.rstrip().endswith(b"}"))
            out["fanout_polls"].append(time.perf_counter() - t0)
            out["fanout_cpu"].append(cpu_seconds(api.pid) - cpu0)
            # an event for every stream client
            name = f"bench-ll-project-{n}"
            t0 = time.perf_counter()
            made = client.with_token(admin_token).post("/v1/iam/projects", {"name": name})
            if made.status != 201:
                raise RuntimeError(f"project: {made}")
            until_all(streams, lambda b: name.encode() in b)
            out["fanout_events"].append(time.perf_counter() - t0)
            for s in polls + streams:
                s.close()
            time.sleep(1.0)             # the streams see their clients gone
    finally:
        store.close()
        stop_api(api, log)
        remove(state_dir)
    return out


def main():
    title(f"long-lived connections: {AGENTS} payload long polls, {STREAMS} event streams")
    out = measure(AGENTS, STREAMS, ROUNDS)
    ratios = out["ratios"]
    table(["GET one node (ms)", "p50 min / median / max", "p99 min / median / max"],
          [[label, spread([r[0] for r in rows]), spread([r[1] for r in rows])]
           for label, rows in (("no long-lived connection", out["none"]),
                               (f"{AGENTS} polls + {STREAMS} streams open", out["open"]))])
    note("p99 open / none, per pair: " + " / ".join(
        f"{v:.2f}x" for v in (min(ratios), statistics.median(ratios), max(ratios)))
        + " (goal <= 1.5x)")
    table(["fan-out (s)", "min / median / max"], [
        [f"a config change to all {AGENTS} polls", spread(out["fanout_polls"], "{:.3f}")],
        ["  the API's CPU seconds for it", spread(out["fanout_cpu"], "{:.3f}")],
        [f"an event to all {STREAMS} streams", spread(out["fanout_events"], "{:.3f}")]])
    # the first round's "none" is before any long-lived connection was ever opened
    note(f"API RSS (MB), by round: nothing open "
         f"{' / '.join(f'{v / 1024:.1f}' for v in out['rss_none'])}"
         f"; {AGENTS + STREAMS} long-lived connections open "
         f"{' / '.join(f'{v / 1024:.1f}' for v in out['rss_open'])}")

if __name__ == "__main__":
    main()
