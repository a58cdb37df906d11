"""What one appliance manages (docs/scale.md): the compute reconcile pass as nodes grow and
as hypervisors grow, and long polls (agents) per API.

    python -m tests.bench scale

Compute: the compute daemon's `Reconciler.pass_once()` (the whole pass: sets,
hypervisors, placement, ports, networks, volumes, domains, teardown, capacity) on
libvirt's test driver, in this process. Each hypervisor is a test driver of its own,
`test:///<file>` with a node description of its own (libvirt.org/drvtest.html: a custom
config per connection is a separate fake host; bench_compute's HOST, 128 cores and 2 TiB).
The test driver fixes every pool at 100 GB, so a hypervisor holds at most 100 nodes of
1 GB: a table's hypervisor count follows from that. Images come from a loopback HTTP server,
downloaded once. Printed, for each size, from a fresh store:
- the first pass, which creates every node's domain (once);
- PASSES converged passes of the same Reconciler ("warm": the daemon's steady pass, its
  memory of each node), min / median / max;
- COLD passes of a new Reconciler each ("cold": a restarted daemon's first pass, which
  reads every domain's definition once), min / median / max.
1. nodes as they grow (SIZES, default 10, 100, 500), 100 nodes a hypervisor;
2. hypervisors as they grow (HYPERVISORS, default 1, 4, 16) with SPREAD nodes in all
   (default 64), so the difference is what each hypervisor costs a pass.

Agents: bench_longlived's measure (tests/bench/bench_longlived.py) with AGENTS payload
long polls open (default 100, 1000) and 10 event streams, ROUNDS rounds each: an
authenticated GET's p99 with and without them, a config change's fan-out to every poll,
the API's CPU seconds for it and its RSS.

Figures are printed, never asserted. Sizes are set by BENCH_SCALE_SIZES,
BENCH_SCALE_HYPERVISORS, BENCH_SCALE_SPREAD, BENCH_SCALE_AGENTS (comma-separated),
BENCH_SCALE_PASSES, BENCH_SCALE_COLD, BENCH_SCALE_ROUNDS.
"""

import os
import time

from appliance.compute.reconcile import Reconciler
from state import Store
from tests.compute.reconcile_helpers import settings_for

from . import note, remove, spread, table, temp_dir, title
from .bench_compute import fake_hosts, node_record, served_base_image

PER_HYPERVISOR = 100        # the test driver's pool: 100 GB, nodes of 1 GB


def sizes(name, default):
    return [int(v) for v in os.environ.get(name, default).split(",") if v.strip()]


SIZES = sizes("BENCH_SCALE_SIZES", "10,100,500")
HYPERVISORS = sizes("BENCH_SCALE_HYPERVISORS", "1,4,16")
SPREAD = int(os.environ.get("BENCH_SCALE_SPREAD", "64"))
AGENTS = sizes("BENCH_SCALE_AGENTS", "100,1000")
STREAMS = 10
PASSES = int(os.environ.get("BENCH_SCALE_PASSES", "5"))
COLD = int(os.environ.get("BENCH_SCALE_COLD", "3"))
ROUNDS = int(os.environ.get("BENCH_SCALE_ROUNDS", "3"))


def hypervisor_record(i, uri):
    return {"name": f"scale-{i}", "description": "", "machine_type": "VM",
            "driver_spec": {"kind": "libvirt", "connection_uri": uri,
                            "storage_pool": "default-pool", "machine_prefix": "vm-"},
            "connection_uri": uri, "agent": None, "builder": None,
            "cores_ratio": 1.0, "ram_ratio": 1.0, "status": "IN_PROGRESS",
            "status_reason": None, "all_cores": 0, "all_ram": 0, "all_disk": 0,
            "avail_cores": 0, "avail_ram": 0, "avail_disk": 0, "accel": None,
            "accel_reason": None}


def timed_pass(rec):
    t0 = time.perf_counter()
    rec.pass_once()
    return time.perf_counter() - t0


def measure(image, nodes_count, hypervisors_count):
    """(first pass s, [warm s], [cold s], nodes ACTIVE) for `nodes_count` nodes over
    `hypervisors_count` test hypervisors, from a fresh store and fresh fake hosts."""
    work = temp_dir("scale-run")
    conns = {}
    store = None
    try:
        conns = fake_hosts(work, hypervisors_count)
        state_dir = os.path.join(work, "state")
        store = Store(state_dir)
        settings = settings_for(state_dir)
        hypervisors = store.collection("compute_hypervisors")
        for i, uri in enumerate(conns):
            hypervisors.insert(hypervisor_record(i, uri))
        nodes = store.collection("compute_nodes")
        nodes.insert_many([node_record(f"scale-{i}", image) for i in range(nodes_count)])
        rec = Reconciler(store, settings, connect=conns.__getitem__)
        first = timed_pass(rec)
        rec.pass_once()         # the first pass's own writes come back once
        active = sum(1 for n in nodes.records() if n["status"] == "ACTIVE")
        warm = [timed_pass(rec) for _ in range(PASSES)]
        cold = [timed_pass(Reconciler(store, settings, connect=conns.__getitem__))
                for _ in range(COLD)]
        return first, warm, cold, active
    finally:
        if store is not None:
            store.close()
        for conn in conns.values():
            conn.close()
        remove(work)


def row(label, nodes_count, hypervisors_count, figures):
    first, warm, cold, active = figures
    per_node = (f"{sorted(warm)[len(warm) // 2] / nodes_count * 1000:.2f} / "
                f"{sorted(cold)[len(cold) // 2] / nodes_count * 1000:.2f}") \
        if nodes_count else "-"
    return [label, f"{active}/{nodes_count}", hypervisors_count, f"{first:.2f}",
            spread(warm, "{:.3f}"), spread(cold, "{:.3f}"), per_node]


HEADERS = ["", "ACTIVE", "hypervisors", "first pass s", "warm pass s min / median / max",
           "cold pass s min / median / max", "ms a node, warm / cold"]


def compute_tables(image):
    rows = []
    for count in SIZES:
        hvs = max(1, -(-count // PER_HYPERVISOR))
        rows.append(row(f"{count} nodes", count, hvs, measure(image, count, hvs)))
    note(f"\n(1) nodes as they grow, {PER_HYPERVISOR} a hypervisor at most; warm: "
         f"{PASSES} passes, cold: {COLD} new Reconcilers")
    table(HEADERS, rows)
    rows = []
    for hvs in HYPERVISORS:
        rows.append(row(f"{hvs} hypervisor(s)", SPREAD, hvs, measure(image, SPREAD, hvs)))
    note(f"\n(2) hypervisors as they grow, {SPREAD} nodes spread over them")
    table(HEADERS, rows)


def agent_table():
    from .bench_longlived import measure as longlived
    rows = []
    for count in AGENTS:
        out = longlived(count, STREAMS, ROUNDS)
        rows.append([f"{count} polls", spread([r[1] for r in out["none"]]),
                     spread([r[1] for r in out["open"]]),
                     spread(out["fanout_polls"], "{:.3f}"),
                     spread(out["fanout_cpu"], "{:.3f}"),
                     f"{max(out['rss_open']) / 1024:.1f}"])
    note(f"\n(3) agents per API: long polls open on one API process, {STREAMS} event "
         f"streams beside them, {ROUNDS} rounds (bench_longlived's measure)")
    table(["agents", "GET p99 ms, none open", "GET p99 ms, polls open",
           "config change to all s", "API CPU s for it", "API RSS MB, open"], rows)


def main():
    title(f"bench_scale: a compute pass as nodes ({', '.join(map(str, SIZES))}) and "
          f"hypervisors ({', '.join(map(str, HYPERVISORS))}) grow, libvirt's test driver; "
          f"long polls per API ({', '.join(map(str, AGENTS))})")
    base = temp_dir("scale")
    images, image = served_base_image(base)
    try:
        compute_tables(image)
    finally:
        images.stop()
        remove(base)
    agent_table()


if __name__ == "__main__":
    main()
