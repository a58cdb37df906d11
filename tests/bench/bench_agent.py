"""Node agents: a change in the store to the file on the node, through the real API and
real agent processes (HW "nodes" with their own root prefixes on this host).

    python -m tests.bench agent

The capability is the test one (tests/agent/testcap.py: a record puts a file on its
target nodes), so the figures are the agent machinery's: change watch, payload long poll,
runner, driver write. Printed:
- latency: LATENCY_AGENTS agents, ROUNDS changes of one record that targets them all;
  each sample is from the write to the moment the new content is in one agent's file
  (read by this process in ~1 ms steps), p50 / p99 / max over all samples. Goal p50 < 200 ms.
- fleet: FLEET_AGENTS agents with 10 files each, all linked to one value; the time from
  the value's change until all files have the new content (3 changes).
- footprint: an idle agent's RSS and CPU (goal RSS < 30 MB).
The API runs in its own process (the production server, with the test capability), with
api_threads large enough for every agent's poll to wait (docs/agent.md, "Long poll").
"""

import os
import subprocess
import sys
import tempfile
import time

from . import ROOT, cpu_seconds, note, remove, settings_for, table, temp_dir, title
from .bench_memory import memory_of

LATENCY_AGENTS = int(os.environ.get("BENCH_AGENT_N", "10"))
ROUNDS = int(os.environ.get("BENCH_AGENT_ROUNDS", "100"))
FLEET_AGENTS = int(os.environ.get("BENCH_AGENT_FLEET", "100"))
FILES_PER_AGENT = 10
SERVE = ("import sys; sys.path.insert(0, {root!r}); from tests.agent import testcap; "
         "testcap.install(); from appliance.server import main; sys.exit(main())")


def start_api(settings):
    from appliance import supervisor
    from . import api_ready
    env = supervisor.child_environment(settings, environ={"PATH": os.environ["PATH"]})
    log = tempfile.NamedTemporaryFile(prefix="bench-agent-api-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-c", SERVE.format(root=ROOT)], cwd=ROOT,
                            env=env, stdout=log, stderr=log)

    class Probe:
        pass
    probe = Probe()
    probe.settings = settings
    deadline = time.monotonic() + 120
    while not api_ready(probe):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the API did not start; log " + log.name)
        time.sleep(0.05)
    return proc, log


def stop_api(proc, log):
    """The API of start_api stopped, and its log removed."""
    proc.terminate()
    proc.wait(30)
    log.close()
    os.unlink(log.name)


def make_agents(store, base, count, endpoint):
    from appliance.agent.credentials import issue_credential
    from tests.agent.agents import AgentProcess
    nodes = store.collection("compute_nodes")
    agents = []
    for i in range(count):
        node = nodes.insert({"name": f"bench-hw-{i}", "node_type": "HW",
                             "project_id": "00000000-0000-0000-0000-000000000000",
                             "status": "ACTIVE"})
        cred = issue_credential(store, node["uuid"])
        agents.append(AgentProcess(os.path.join(base, f"n{i}"), cred, endpoint,
                                   wait=25).start())
    return agents


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def wait_all(paths, content, since, timeout=120):
    """{path: seconds from `since` until it held `content`}."""
    seen, left = {}, set(paths)
    deadline = since + timeout
    while left:
        for path in list(left):
            if read(path) == content:
                seen[path] = time.perf_counter() - since
                left.discard(path)
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{len(left)} files not updated after {timeout} s")
        time.sleep(0.001)
    return seen


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(count, files, changes, threads):
    """[(seconds of each agent's file per change)], idle (rss kB, cpu %) of one agent."""
    from state import Store
    from tests.agent import testcap
    state_dir, base = temp_dir("bench-agent-state"), temp_dir("bench-agent-nodes")
    settings = settings_for(state_dir, api_threads=threads, log_level="WARNING")
    api, log = start_api(settings)
    store = Store(state_dir)
    agents = []
    try:
        agents = make_agents(store, base, count, f"http://127.0.0.1:{settings['api_port']}")
        masters = store.collection(testcap.MASTER_KIND)
        value = masters.insert({"target": None, "path": "/", "content": "v0"})
        nodes = [a.credential["node"] for a in agents]
        for i in range(files):
            masters.insert({"target": {"kind": "nodes", "nodes": nodes},
                            "path": f"/etc/bench/{i}.conf", "content": None,
                            "link": value["uuid"]})
        paths = [a.root + f"/etc/bench/{i}.conf" for a in agents for i in range(files)]
        wait_all(paths, "v0", time.perf_counter(), timeout=300)
        rounds = []
        for n in range(1, changes + 1):
            time.sleep(0.05)
            t0 = time.perf_counter()
            masters.update(value["uuid"], {"content": f"v{n}"})
            rounds.append(wait_all(paths, f"v{n}", t0))
        time.sleep(2)
        pid = agents[0].proc.pid
        rss = memory_of(pid)[0]
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        time.sleep(10)
        cpu = (cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0) * 100
        return rounds, rss, cpu
    finally:
        for agent in agents:
            agent.stop()
        store.close()
        stop_api(api, log)
        remove(state_dir)
        remove(base)


def main():
    title("bench_agent: store change -> file on the node, real API and agent processes")
    rounds, rss, cpu = run(LATENCY_AGENTS, 1, ROUNDS, threads=max(32, LATENCY_AGENTS * 2))
    samples = [s for r in rounds for s in r.values()]
    table(["agents", "changes", "samples", "p50 ms", "p99 ms", "max ms"],
          [[LATENCY_AGENTS, ROUNDS, len(samples), f"{pct(samples, 50) * 1000:.0f}",
            f"{pct(samples, 99) * 1000:.0f}", f"{max(samples) * 1000:.0f}"]])
    note("goal p50 < 200 ms (the reference: a 3 s builder loop plus a 3 s agent poll)")
    table(["idle agent", "RSS MB", "CPU %"], [["one of them", f"{rss / 1024:.1f}",
                                                f"{cpu:.2f}"]])
    note("goal RSS < 30 MB")
    fleet, _, _ = run(FLEET_AGENTS, FILES_PER_AGENT, 3,
                      threads=int(FLEET_AGENTS / 0.75) + 8)
    table(["agents", "files each", "change", "all converged s", "p50 file s"],
          [[FLEET_AGENTS, FILES_PER_AGENT, n + 1, f"{max(r.values()):.2f}",
            f"{pct(list(r.values()), 50):.2f}"] for n, r in enumerate(fleet)])


if __name__ == "__main__":
    main()
