"""Certificates: issuance time against Pebble, through our DNS; the daemon's memory.

    python -m tests.bench certificates

The chain of tests/secret/pebble.py: the API, our DNS daemon and the certificate daemon
as their own processes (`python -m daemons.<name>`), Pebble (Debian's, PEBBLE_VA_NOSLEEP=1)
resolving the challenges through our DNS server. ROUNDS certificates, each for a new name
and its wildcard (two DNS-01 challenges); each time is from the POST to the moment the
store shows the certificate ACTIVE, read in 1 ms steps. The first one also pays for the
ACME account's registration and the `acme` import; it is printed apart. Printed: first,
then p50 / min / max of the others, the daemon's reaction to the POST (to IN_PROGRESS,
through the store's watch), and its RSS idle before any order (the
`acme` library not loaded yet) and after the orders.
"""

import os
import time

from . import median, note, remove, table, temp_dir, title

ROUNDS = int(os.environ.get("BENCH_CERTIFICATES_ROUNDS", "8"))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def until_active(coll, uuid_, since, timeout=60):
    """(seconds to IN_PROGRESS: the daemon's reaction, seconds to ACTIVE)."""
    started = None
    while time.perf_counter() < since + timeout:
        record = coll.get(uuid_)
        if started is None and record and record["status"] in ("IN_PROGRESS", "ACTIVE"):
            started = time.perf_counter() - since
        if record and record["status"] == "ACTIVE":
            return started, time.perf_counter() - since
        if record and record["status"] == "ERROR":
            raise RuntimeError(f"certificate {uuid_}: {record['status_reason']}")
        time.sleep(0.001)
    raise RuntimeError(f"certificate {uuid_} not ACTIVE after {timeout} s")


def main():
    from tests.secret.pebble import AcmeWorld
    title(f"bench_certificates: POST -> ACTIVE through ACME DNS-01 against Pebble, "
          f"{ROUNDS} certificates of a name and its wildcard")
    state = temp_dir("certificates")
    try:
        with AcmeWorld(os.path.join(state, "state")) as world:
            admin = world.admin()
            coll = world.server.store.collection("secret_certificates")
            pid = world.daemon.proc.pid
            time.sleep(2)           # the daemon's start-up pass is over
            idle_before = rss_mb(pid)
            times, reactions = [], []
            for i in range(ROUNDS):
                zone = f"bench{i}.test"
                world.zone(admin, zone)
                t0 = time.perf_counter()
                cert = world.certificate(admin, [zone, f"*.{zone}"])
                reaction, issued = until_active(coll, cert["uuid"], t0)
                times.append(issued)
                reactions.append(reaction)
            time.sleep(2)
            idle_after = rss_mb(pid)
    finally:
        remove(state)
    rest = times[1:]
    table(["what", "seconds"], [
        ["first (account registration)", f"{times[0]:.2f}"],
        [f"p50 of the next {len(rest)}", f"{median(rest):.2f}"],
        ["min / max", f"{min(rest):.2f} / {max(rest):.2f}"],
        ["POST -> IN_PROGRESS (the daemon's reaction), p50 / max",
         f"{median(reactions) * 1000:.0f} / {max(reactions) * 1000:.0f} ms"]])
    table(["certificate daemon", "RSS MB"], [
        ["idle, before any order", f"{idle_before:.1f}"],
        ["idle, after the orders (each ran in its own process)", f"{idle_after:.1f}"]])
    note("Pebble answers the finalization after 1 s (the acme library's poll interval): "
         "about 1 s of each issuance is that wait")


if __name__ == "__main__":
    main()
