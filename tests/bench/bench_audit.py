"""What the audit trail costs (appliance/api/audit.py, docs/audit.md), side by side.

    python -m tests.bench audit

(a) In process, the WSGI middleware around a trivial app answering 201 to a POST: with
    the trail (the entry built and queued; the writer thread appends it) against without
    (Middleware(app, None)). The difference is all the request thread pays.
(b) Through the real API process: DELETE of a secret that does not exist (404, audited:
    authentication, the lookup, the entry) against GET of the same missing secret (404,
    not audited: the same authentication and lookup). The ratio bounds what the entry adds
    to a real write; a successful write pays more for the store than for its entry.
(c) Reading: GET /v1/audit/?page_limit=50 through the real API with ENTRIES entries in
    the trail, one a millisecond as a busy API writes them (written as segment files
    while it runs, without their index sidecars):
    the first read (which rebuilds the sidecars), then pages unfiltered (oldest and newest
    first), filtered by kind and by project, and a page deep in the trail reached with
    PAGES markers. A read skips the segments whose sidecar says they cannot hold an
    answer, and stops reading once the page is sure.

(a) and (b) alternate slices (A B A B ...), ROUNDS of each, and print each side's
min / median / max per request and the ratio of each side-by-side pair as
min / median / max; (c) repeats READS reads.

BENCH_AUDIT_ROUNDS (15), BENCH_AUDIT_CALLS (2000: calls per slice in (a)),
BENCH_AUDIT_REQUESTS (100: requests per slice in (b)), BENCH_AUDIT_ENTRIES (100000) and
BENCH_AUDIT_READS (10), BENCH_AUDIT_PAGES (20) change the sizes.
"""

import io
import os
import uuid

from . import appliance, note, spread, table, timed, title

ROUNDS = int(os.environ.get("BENCH_AUDIT_ROUNDS", "15"))
CALLS = int(os.environ.get("BENCH_AUDIT_CALLS", "2000"))
REQUESTS = int(os.environ.get("BENCH_AUDIT_REQUESTS", "100"))
ENTRIES = int(os.environ.get("BENCH_AUDIT_ENTRIES", "100000"))
READS = int(os.environ.get("BENCH_AUDIT_READS", "10"))
PAGES = int(os.environ.get("BENCH_AUDIT_PAGES", "20"))


def side_by_side(label_a, run_a, label_b, run_b, per, scale, fmt):
    times_a, times_b = [], []
    for _ in range(ROUNDS):
        times_a.append(timed(run_a)[0][0] / per)
        times_b.append(timed(run_b)[0][0] / per)
    rows = [[label_a, spread([t * scale for t in times_a], fmt), ""],
            [label_b, spread([t * scale for t in times_b], fmt),
             spread([b / a for a, b in zip(times_a, times_b)])]]
    table(["side", "per request min / median / max", "ratio to the first"], rows)


def _middleware_bench(tmp):
    from appliance.api import audit, request_context
    from appliance.api.wsgi import Middleware

    def app(environ, start_response):
        audit.note(environ, route="/v1/things", kind="things", resource_uuid=str(uuid.uuid4()),
                   project_id=None)
        request_context.set_actor({"type": "user", "id": "u", "name": "bench",
                                   "project_id": None})
        start_response("201 Created", [("Content-Type", "application/json")])
        return [b"{}"]

    trail = audit.Trail(tmp, 1 << 30, 86400.0, 8 << 20)
    with_trail, without = Middleware(app, trail), Middleware(app, None)

    def environ():
        return {"REQUEST_METHOD": "POST", "PATH_INFO": "/v1/things", "REMOTE_ADDR": "127.0.0.1",
                "wsgi.input": io.BytesIO(b"")}

    def calls(mw):
        def run():
            for _ in range(CALLS):
                for _chunk in mw(environ(), lambda *a: None):
                    pass
        return run
    try:
        side_by_side("without the trail", calls(without), "with the trail", calls(with_trail),
                     CALLS, 1e6, "{:.1f}")
        trail.flush(60)
    finally:
        trail.close()
    note(f"(a) µs per call of the middleware; {ROUNDS} slices of {CALLS} calls each side; "
         f"entries lost: {trail.lost}")


def _write_segments(state_dir, count):
    import datetime
    import orjson
    from appliance.api.audit import format_time, now, segment_name
    per_segment = 20000
    made = 0
    moment = now()
    start = moment
    while made < count:
        name = segment_name(moment.replace(microsecond=made % 1000000))
        lines = []
        for i in range(made, min(count, made + per_segment)):
            lines.append(orjson.dumps({
                "uuid": str(uuid.uuid4()),
                "created_at": format_time(start + datetime.timedelta(milliseconds=i)),
                "request_id": uuid.uuid4().hex, "method": "POST", "path": "/v1/secret/secrets",
                "route": "/v1/secret/secrets", "status": 201, "source": "127.0.0.1",
                "actor": {"type": "user", "id": str(uuid.uuid4()), "name": "bench",
                          "project_id": None},
                "kind": "secret_secrets", "resource_uuid": str(uuid.uuid4()),
                "project_id": None}) + b"\n")
        with open(os.path.join(state_dir, name), "wb") as f:
            f.write(b"".join(lines))
        made += len(lines)
        moment = moment.replace(second=(moment.second + 1) % 60)


def main():
    title("audit trail: what an entry costs the request, and what a read costs")
    import tempfile
    tmp = tempfile.mkdtemp(prefix="bench-audit-")
    try:
        _middleware_bench(tmp)
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)

    with appliance("bench-audit") as (settings, admin, _store):
        missing = f"/v1/secret/secrets/{uuid.uuid4()}"

        def requests(method):
            def run():
                for _ in range(REQUESTS):
                    resp = admin.request(method, missing)
                    if resp.status != 404:
                        raise RuntimeError(f"expected 404, got {resp}")
            return run
        side_by_side("GET missing (not audited)", requests("GET"),
                     "DELETE missing (audited)", requests("DELETE"), REQUESTS, 1000, "{:.2f}")
        note(f"(b) ms per request through the API process; {ROUNDS} slices of {REQUESTS} "
             "requests each side, one connection each")
        _write_segments(settings["state_dir"], ENTRIES)
        size = sum(os.path.getsize(os.path.join(settings["state_dir"], n))
                   for n in os.listdir(settings["state_dir"]) if n.startswith("audit-"))
        first, _ = timed(lambda: admin.get("/v1/audit/", query={"page_limit": "50"}), 1)
        times, _ = timed(lambda: admin.get("/v1/audit/", query={"page_limit": "50"}), READS)
        newest, _ = timed(lambda: admin.get("/v1/audit/", query={
            "page_limit": "50", "sort_dir": "desc"}), READS)
        marker = None
        for _ in range(PAGES):
            query = {"page_limit": "50"}
            if marker:
                query["page_marker"] = marker
            marker = admin.get("/v1/audit/", query=query).header("X-Pagination-Marker")
        deep, _ = timed(lambda: admin.get("/v1/audit/", query={
            "page_limit": "50", "page_marker": marker}), READS)
        filtered, _ = timed(lambda: admin.get("/v1/audit/", query={
            "page_limit": "50", "kind": "iam_users"}), READS)
        by_project, _ = timed(lambda: admin.get("/v1/audit/", query={
            "page_limit": "50", "project_id": str(uuid.uuid4())}), READS)
        table(["read", "ms min / median / max"],
              [[f"the first read, {ENTRIES} entries ({size / 1e6:.0f} MB), once",
                spread([t * 1000 for t in first], "{:.0f}")],
               [f"first page of 50, {ENTRIES} entries ({size / 1e6:.0f} MB)",
                spread([t * 1000 for t in times], "{:.0f}")],
               ["the same, newest first", spread([t * 1000 for t in newest], "{:.0f}")],
               [f"page {PAGES + 1} (the marker of page {PAGES})",
                spread([t * 1000 for t in deep], "{:.0f}")],
               ["the same, filtered to a kind that matches none",
                spread([t * 1000 for t in filtered], "{:.0f}")],
               ["the same, filtered to another project (an owner's read)",
                spread([t * 1000 for t in by_project], "{:.0f}")]])
        note("(c) the segments are written without sidecars: the first read rebuilds them")
