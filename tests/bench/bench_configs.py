"""Configs through real node agents: how long a change takes to reach the files.

    python -m tests.bench configs

The API, the delivery and the status daemons run as the supervisor starts them; AGENTS agent processes
(daemons/agent.py, HW nodes with their own root prefixes) run on this host. Measured from
the start of the request to the moment the file on the node holds the new content (read by
this process in 1 ms steps):

- a config change (PUT of a text config on one node): p50 / p99 (goal p50 < 200 ms);
- link tracking: a password linked by CONFIGS configs on every node is regenerated; the
  time until all AGENTS x CONFIGS files hold it (p50 / p99 over ROUNDS), and the first.

BENCH_CONFIGS_AGENTS, BENCH_CONFIGS_CONFIGS and BENCH_CONFIGS_ROUNDS change the sizes
(the issue's large case is 100 agents with 10 configs each).
"""

import os
import tempfile
import time

from . import appliance, note, remove, table, title

AGENTS = int(os.environ.get("BENCH_CONFIGS_AGENTS", "10"))
CONFIGS = int(os.environ.get("BENCH_CONFIGS_CONFIGS", "10"))
ROUNDS = int(os.environ.get("BENCH_CONFIGS_ROUNDS", "30"))
ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
C = "/v1/config/configs"


def created(resp):
    if resp.status != 201:
        raise RuntimeError(f"create failed: {resp}")
    return resp.json


def start_agents(admin, port, base, count):
    from tests.agent.agents import AgentProcess
    agents = []
    for i in range(count):
        node = created(admin.post("/v1/compute/nodes", {
            "name": f"bench-{i}", "project_id": ADMIN_PROJECT, "cores": 1, "ram": 1024,
            "node_type": "HW"}))
        token = admin.post(f"/v1/compute/nodes/{node['uuid']}/actions/enroll/invoke").json
        cred = admin.post("/v1/ua/enroll", {"token": token["token"]}).json
        agents.append((node, AgentProcess(os.path.join(base, f"n{i}"), cred,
                                          f"http://127.0.0.1:{port}").start()))
    return agents


def wait_files(paths, content, since, timeout=60):
    """Seconds from `since` until every path holds `content`."""
    pending = set(paths)
    deadline = since + timeout
    while pending:
        for path in list(pending):
            try:
                with open(path) as f:
                    if f.read() == content:
                        pending.discard(path)
            except FileNotFoundError:
                pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{len(pending)} files not delivered after {timeout} s")
        if pending:
            time.sleep(0.001)
    return time.perf_counter() - since


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    title(f"bench_configs: {AGENTS} agents, {CONFIGS} linked configs each, {ROUNDS} rounds")
    base = tempfile.mkdtemp(prefix="bench-configs-")
    agents = []
    try:
        with appliance("configs", "delivery", "status") as (settings, admin, store):
            agents = start_agents(admin, settings["api_port"], base, AGENTS)
            nodes = [n["uuid"] for n, _ in agents]
            first_node, first_agent = agents[0]

            # a config change on one node
            single = created(admin.post(C, {
                "name": "single", "project_id": ADMIN_PROJECT, "path": "/etc/bench/one",
                "target": {"kind": "node", "node": first_node["uuid"]},
                "body": {"kind": "text", "content": "0"}}))
            path = first_agent.root + "/etc/bench/one"
            wait_files([path], "0", time.perf_counter())
            changes = []
            for r in range(1, ROUNDS + 1):
                t0 = time.perf_counter()
                admin.put(f"{C}/{single['uuid']}", {"body": {"kind": "text",
                                                             "content": str(r)}})
                changes.append(wait_files([path], str(r), t0))

            # link tracking across every node
            pw = created(admin.post("/v1/secret/passwords", {
                "name": "bench", "project_id": ADMIN_PROJECT}))
            link = f"$core.secret.passwords.${pw['uuid']}:value"
            for i in range(CONFIGS):
                created(admin.post(C, {
                    "name": f"linked-{i}", "project_id": ADMIN_PROJECT,
                    "path": f"/etc/bench/linked-{i}.conf",
                    "target": {"kind": "nodes", "nodes": nodes},
                    "body": {"kind": "template", "template": "password={{ pw }}\n",
                             "variables": {"pw": link}}}))
            files = [a.root + f"/etc/bench/linked-{i}.conf" for _, a in agents
                     for i in range(CONFIGS)]
            t0 = time.perf_counter()
            first = wait_files(files, f"password={pw['value']}\n", t0)
            linked = []
            for _ in range(ROUNDS):
                t0 = time.perf_counter()
                value = admin.post(f"/v1/secret/passwords/{pw['uuid']}/actions/regenerate/"
                                   "invoke", {}).json["value"]
                linked.append(wait_files(files, f"password={value}\n", t0))
    finally:
        for _, agent in agents:
            agent.stop()
        remove(base)

    def ms(v):
        return f"{v * 1000:.0f}"
    table(["measure", "p50 ms", "p99 ms", "max ms"], [
        ["config PUT -> file on 1 node", ms(pct(changes, 50)), ms(pct(changes, 99)),
         ms(max(changes))],
        [f"password regenerate -> {AGENTS}x{CONFIGS} files", ms(pct(linked, 50)),
         ms(pct(linked, 99)), ms(max(linked))],
    ])
    note(f"first delivery of {AGENTS}x{CONFIGS} linked files: {ms(first)} ms; "
         "goal: config change p50 < 200 ms")


if __name__ == "__main__":
    main()
