"""Services: unit rendering, the producer over many services, and the lease's rate.

    python -m tests.bench services

1. `unit.render` of SERVICES services, each ordered after two others and with a shell
   step before and after: microseconds per unit.
2. `targets.for_node` over a store of SERVICES services on NODES HW nodes (each node gets
   SERVICES/NODES services of its own plus every set-wide one): milliseconds per node,
   min / median / max, which is what each agent's payload costs the API.
3. The lease through the real API (its own process, as the supervisor starts it): one
   agent renewing in a loop, then THREADS agents each renewing its own service at once:
   grants per second. A monopoly service on two nodes costs the API 1.3 asks a second
   (its holder every lease/3, 3.3 s by default; its standby every second), so this rate
   over 1.3 is how many such services one API keeps.
"""

import os
import threading
import time
import uuid

from appliance.agent.targets import View
from appliance.service import targets, unit
from state import Store

from . import appliance, median, note, spread, table, temp_dir, title

SERVICES = int(os.environ.get("BENCH_SERVICES", "1000"))
NODES = 100
ROUNDS = 2000
THREADS = 4
ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


def record(i, node, others=()):
    return {"uuid": str(uuid.uuid4()), "name": f"svc-{i}", "path": f"exec /usr/bin/app-{i} "
            "--listen 0.0.0.0:80 --name \"$HOSTNAME\" 100%", "user": "root", "group": None,
            "service_type": {"kind": "simple", "count": 1}, "target_status": "enabled",
            "before": [{"kind": "shell", "command": "mkdir -p /srv/app"}] + [
                {"kind": "service", "service": o} for o in others],
            "after": [{"kind": "shell", "command": "echo started"}],
            "project_id": ADMIN_PROJECT, "target": {"kind": "node", "node": node}}


def bench_render():
    records = [record(i, str(uuid.uuid4())) for i in range(SERVICES)]
    units = {r["uuid"]: unit.unit_name(r, str(uuid.uuid4())) for r in records}
    for i, r in enumerate(records):
        r["before"] += [{"kind": "service", "service": records[i - 1]["uuid"]},
                        {"kind": "service", "service": records[i - 2]["uuid"]}]
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for r in records:
            unit.render(r, units)
        runs.append((time.perf_counter() - t0) / len(records))
    return runs


def bench_producer():
    state_dir = temp_dir("services")
    store = Store(state_dir)
    try:
        # a service lands only on its own project's nodes (appliance/tenancy/nodes.py)
        nodes = [{"uuid": str(uuid.uuid4()), "name": f"n{i}", "project_id": ADMIN_PROJECT}
                 for i in range(NODES)]
        store.collection("compute_nodes").insert_many(nodes)
        records, previous = [], []
        for i in range(SERVICES):
            node = nodes[i % NODES]["uuid"]
            records.append(record(i, node, previous[-2:] if i % 3 else ()))
            previous.append(records[-1]["uuid"])
        store.collection("em_services").insert_many(records)
        view = View(store)
        times, items = [], 0
        for node in store.collection("compute_nodes").records():
            t0 = time.perf_counter()
            items += len(targets.for_node(view, node))
            times.append(time.perf_counter() - t0)
        return times, items
    finally:
        store.close()
        import shutil
        shutil.rmtree(state_dir, ignore_errors=True)


def bench_lease():
    with appliance("services") as (_, admin, _store):
        def node():
            resp = admin.post("/v1/compute/nodes", {"name": f"hw-{uuid.uuid4().hex[:6]}",
                                                    "cores": 1, "ram": 1024,
                                                    "node_type": "HW",
                                                    "project_id": ADMIN_PROJECT})
            assert resp.status == 201, resp
            return resp.json["uuid"]

        def service(on):
            resp = admin.post("/v1/em/services", {
                "project_id": ADMIN_PROJECT, "path": "sleep infinity",
                "target": {"kind": "node", "node": on}, "service_type": {"kind": "monopoly"}})
            assert resp.status == 201, resp
            return resp.json["uuid"]

        def renew(svc, on, count):
            for _ in range(count):
                resp = admin.post(f"/v1/em/services/{svc}/actions/lease/invoke", {"node": on})
                assert resp.status == 200 and resp.json["granted"], resp

        pairs = []
        for _ in range(THREADS):
            on = node()
            pairs.append((service(on), on))
        t0 = time.perf_counter()
        renew(*pairs[0], ROUNDS)
        single = ROUNDS / (time.perf_counter() - t0)
        threads = [threading.Thread(target=renew, args=(s, n, ROUNDS // THREADS))
                   for s, n in pairs]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        parallel = ROUNDS // THREADS * THREADS / (time.perf_counter() - t0)
        return single, parallel


def main():
    title(f"bench_services: rendering and producing {SERVICES} services on {NODES} nodes; "
          f"the lease over the real API")
    per_unit = bench_render()
    times, items = bench_producer()
    single, parallel = bench_lease()
    table(["measure", "value"], [
        ["render one unit, us (min / median / max of 5 runs)",
         spread([t * 1e6 for t in per_unit], "{:.0f}")],
        [f"for_node per node, ms ({items} items in all)",
         spread([t * 1e3 for t in times], "{:.1f}")],
        ["for_node, all nodes, ms", f"{sum(times) * 1e3:.0f}"],
        ["lease renewals per second, one agent", f"{single:.0f}"],
        [f"lease renewals per second, {THREADS} agents at once", f"{parallel:.0f}"],
        ["monopoly services on 2 nodes one API keeps (rate / 1.3)",
         f"~{parallel / 1.3:.0f}"],
    ])
    note(f"median render {median(per_unit) * 1e6:.0f} us per unit")
