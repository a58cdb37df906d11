"""Network: IPAM allocations per second, 1,000 ports by 1 process and by 6 at once.

Each round is a fresh store. The creating processes are started first and wait at one
event, so that process start-up is not counted: the time runs from the event to the last
process's answer. All ports go on one network (the admin project's default, 10.20.0.0/22,
1,003 leases), so with 6 processes every allocation contends for the same lowest address:
the worst case. Sides alternate (1, 6, 1, 6 ...), ROUNDS times; printed as min / median
/ max, with the check that no address or MAC was given twice.
"""

import multiprocessing
import os
import uuid

from state import Store

from . import note, now, remove, settings_for, spread, table, temp_dir, title

PORTS = int(os.environ.get("BENCH_NETWORK_PORTS", "1000"))
ROUNDS = int(os.environ.get("BENCH_NETWORK_ROUNDS", "3"))
ADMIN = "00000000-0000-0000-0000-000000000000"


def _creator(directory, count, ready, start, done):
    from appliance.network import ports  # noqa: PLC0415 - in the spawned child
    store = Store(directory)
    settings = settings_for(directory, network_routing="isolated")
    ready.put(True)
    start.wait()
    for _ in range(count):
        ports.allocate(store, settings, {"uuid": str(uuid.uuid4()), "project_id": ADMIN,
                                         "network": None})
    done.put(count)
    store.close()


def one_round(processes):
    """Seconds to allocate PORTS ports with `processes` creators; checks the result."""
    from appliance.network import networks  # noqa: PLC0415
    directory = temp_dir("network")
    try:
        ctx = multiprocessing.get_context("spawn")
        ready, start, done = ctx.Queue(), ctx.Event(), ctx.Queue()
        shares = [PORTS // processes + (i < PORTS % processes) for i in range(processes)]
        children = [ctx.Process(target=_creator, args=(directory, n, ready, start, done))
                    for n in shares]
        for child in children:
            child.start()
        for _ in children:
            ready.get(timeout=300)
        # the children have opened the store and wait: let them go together
        t0 = now()
        start.set()
        made = sum(done.get(timeout=1800) for _ in children)
        seconds = now() - t0
        for child in children:
            child.join()
        store = Store(directory)
        try:
            all_ports = networks.ports(store).records()
        finally:
            store.close()
        assert made == PORTS == len(all_ports)
        assert len({p["ipv4"] for p in all_ports}) == len({p["mac"] for p in all_ports}) == PORTS
        return seconds
    finally:
        remove(directory)


def main():
    title(f"Network: IPAM, {PORTS} ports on one network, 1 and 6 creating processes")
    results = {1: [], 6: []}
    for _ in range(ROUNDS):
        for processes in (1, 6):
            results[processes].append(one_round(processes))
            note(f"  {processes} process(es): {results[processes][-1]:.2f} s")
    table(["creators", "allocations/s (min / median / max)", "seconds (min / median / max)"],
          [[p, spread([PORTS / s for s in results[p]], "{:.0f}"), spread(results[p])]
           for p in (1, 6)])
    load1, load5, _ = os.getloadavg()
    note(f"(load average after: {load1:.2f} / {load5:.2f}; no address or MAC given twice)")


if __name__ == "__main__":
    main()
