"""Secrets: latency from POST (or PUT) to status ACTIVE, through the real delivery daemon.

    python -m tests.bench secret

The API and the delivery daemon run as the supervisor and their units start them (their
own processes, the shipped settings, access log on). ROUNDS rounds of COUNT creates and
then COUNT rotations; each latency is from the start of the request to the moment the
store shows the secret ACTIVE, read by this process in 1 ms steps (so HTTP polling does
not blur it). Printed per kind of change: the round's p50 and max, min / median / max
over the rounds. Goal: p50 < 100 ms.
"""

import os
import time
import uuid

from . import appliance, note, spread, table, title

ROUNDS = int(os.environ.get("BENCH_SECRET_ROUNDS", "5"))
COUNT = 40
ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


def until_active(coll, uuid_, since, timeout=30):
    deadline = since + timeout
    while time.perf_counter() < deadline:
        record = coll.get(uuid_)
        if record and record["status"] == "ACTIVE":
            return time.perf_counter() - since
        time.sleep(0.001)
    raise RuntimeError(f"secret {uuid_} not ACTIVE after {timeout} s")


def one_round(admin, coll, round_):
    """(create latencies, rotation latencies) of COUNT secrets, in seconds."""
    created, rotated, made = [], [], []
    for i in range(COUNT):
        t0 = time.perf_counter()
        resp = admin.post("/v1/secret/secrets", {
            "name": f"bench-{round_}-{i}", "project_id": ADMIN_PROJECT,
            "constructor": {"kind": "plain"}, "value": uuid.uuid4().hex})
        assert resp.status == 201, resp
        created.append(until_active(coll, resp.json["uuid"], t0))
        made.append(resp.json["uuid"])
    for secret in made:
        t0 = time.perf_counter()
        resp = admin.put(f"/v1/secret/secrets/{secret}", {"value": uuid.uuid4().hex})
        assert resp.status == 200, resp
        rotated.append(until_active(coll, secret, t0))
    return created, rotated


def main():
    title(f"bench_secret: POST/PUT -> ACTIVE through the delivery daemon, {ROUNDS} rounds "
          f"of {COUNT} each")
    with appliance("secret", "delivery") as (_, admin, store):
        rounds = [one_round(admin, store.collection("secret_secrets"), r)
                  for r in range(ROUNDS)]

    def ms(values):
        return spread([v * 1000 for v in values], "{:.1f}")

    def p50(values):
        return sorted(values)[len(values) // 2]
    rows = [[what, ms([p50(r[i]) for r in rounds]), ms([max(r[i]) for r in rounds])]
            for i, what in enumerate(("create -> ACTIVE", "rotate -> ACTIVE"))]
    table(["what", "p50 ms per round: min / median / max", "max ms per round: min / median / max"],
          rows)
    note(f"goal: p50 < 100 ms ({ROUNDS} rounds of {COUNT})")


if __name__ == "__main__":
    main()
