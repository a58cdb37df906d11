"""The fuzzer's long run: schemathesis over the served OpenAPI document until at least
10,000 requests were sent (BENCH_FUZZ_REQUESTS to change it).

    python -m tests.bench fuzz

The API serves from its own process, so that case generation (hypothesis, CPU-bound) and
the server do not share a GIL. Rounds over every operation, positive and negative cases,
random (not derandomized: each run tries new inputs), as the fuzzer's own admin user
(tests/fuzz.py). Prints the request count, the server errors (5xx) and every distinct
check failure with a curl line to reproduce it; asserts nothing, like every bench.
"""

import os
import sys
import time

from . import ADMIN_PASSWORD, Child, note, remove, temp_dir, title

REQUESTS = int(os.environ.get("BENCH_FUZZ_REQUESTS", "10000"))
EXAMPLES_PER_ROUND = 10      # per operation and mode


def serve_app(state_dir):
    from tests.apiserver import ApiServer
    from . import quiet_waitress, wait_for_parent
    quiet_waitress()
    # the fuzzer's random password grants all come from 127.0.0.1: past the address's
    # free failures its own re-logins would wait up to 15 min (docs/iam.md, "Login
    # throttling"), which is not what this run measures
    srv = ApiServer(state_dir, ADMIN_PASSWORD, login_free_failures_address=10 ** 9).start()
    wait_for_parent({"port": srv.port})
    srv.stop()


def main():
    from tests.fuzz import Fuzzer, Stats, failure_text
    title(f"fuzz: schemathesis over /v1/openapi.json, at least {REQUESTS} requests")
    state = temp_dir("bench-fuzz-")
    child = Child("tests.bench.bench_fuzz", state)
    started = time.perf_counter()
    try:
        fuzzer = Fuzzer("127.0.0.1", child.info["port"], ADMIN_PASSWORD)
        stats, rounds = Stats(), 0
        while stats.requests < REQUESTS:
            fuzzer.run(EXAMPLES_PER_ROUND, stats=stats)
            rounds += 1
            note(f"round {rounds}: {stats.requests} requests so far, "
                 f"{stats.server_errors} server errors "
                 f"({time.perf_counter() - started:.0f} s)")
    finally:
        child.stop()
        remove(state)
    note(f"operations: {len(fuzzer.operations)}; {stats.report()}")
    note(f"requests: {stats.requests}; server errors: {stats.server_errors}; "
         f"distinct check failures: {len(stats.failures)}; "
         f"{stats.requests / (time.perf_counter() - started):.0f} requests/s")
    if stats.failures:
        note(failure_text(stats, limit=50))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve":
        serve_app(sys.argv[2])
    else:
        main()
