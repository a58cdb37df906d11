"""Secrets: latency from POST (or PUT) to status ACTIVE, through the real delivery daemon.

The API runs in this process on Waitress; the delivery daemon is its own process. Status
is polled in the store (1 ms steps), so HTTP polling does not blur the figure.
"""

import time
import uuid

from tests.apiserver import ApiServer
from tests.secret.conftest import DaemonProcess

from . import ADMIN_PASSWORD, median, ms, note, table, temp_dir, title

COUNT = 200
ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


def until_active(coll, uuid_, since, timeout=30):
    deadline = since + timeout
    while time.perf_counter() < deadline:
        record = coll.get(uuid_)
        if record and record["status"] == "ACTIVE":
            return time.perf_counter() - since
        time.sleep(0.001)
    raise RuntimeError(f"secret {uuid_} not ACTIVE after {timeout} s")


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main():
    title(f"bench_secret: POST/PUT -> ACTIVE through the delivery daemon, {COUNT} each")
    srv = ApiServer(temp_dir("bench-secret"), ADMIN_PASSWORD).start()
    daemon = DaemonProcess("delivery", srv.settings["state_dir"]).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        coll = srv.store.collection("secret_secrets")
        time.sleep(1.0)     # the daemon is up and has done its first pass
        created, rotated, made = [], [], []
        for i in range(COUNT):
            t0 = time.perf_counter()
            resp = admin.post("/v1/secret/secrets", {
                "name": f"bench-{i}", "project_id": ADMIN_PROJECT,
                "constructor": {"kind": "plain"}, "value": uuid.uuid4().hex})
            created.append(until_active(coll, resp.json["uuid"], t0))
            made.append(resp.json["uuid"])
        for secret in made:
            t0 = time.perf_counter()
            admin.put(f"/v1/secret/secrets/{secret}", {"value": uuid.uuid4().hex})
            rotated.append(until_active(coll, secret, t0))
        rows = [[name, ms(percentile(v, 50)), ms(percentile(v, 99)), ms(max(v)),
                 ms(median(v))]
                for name, v in (("create -> ACTIVE", created), ("rotate -> ACTIVE", rotated))]
        table(["what", "p50 ms", "p99 ms", "max ms", "median ms"], rows)
        note("goal: p50 < 100 ms")
    finally:
        daemon.stop()
        srv.stop()


if __name__ == "__main__":
    main()
