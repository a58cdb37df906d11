"""The trail's metrics (docs/metrics.md): entries it could not write, its bytes and its
segments, read from GET /metrics with prometheus_client's own parser. The loss is real:
the open segment is made immutable (chattr +i), so the writer's next append fails with
EPERM, as it would on a disk gone read-only."""

import os
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.audit.conftest import trail_files


def scrape(admin):
    resp = admin.get("/metrics")
    assert resp.status == 200, resp
    return {s.name: s.value for family in text_string_to_metric_families(resp.raw.decode())
            for s in family.samples if s.name.startswith("appliance_audit_")}


@pytest.mark.skipif(shutil.which("chattr") is None or os.geteuid() != 0,
                    reason="needs chattr and root to make a segment immutable")
def test_entries_that_cannot_be_written_are_counted_in_the_metrics(fresh_server):
    admin = fresh_server.client(fresh_server.login("admin", "admin-password-for-tests"))
    trail, state_dir = fresh_server.api.trail, fresh_server.settings["state_dir"]
    assert admin.post("/v1/iam/organizations/", {"name": "before-loss"}).status == 201
    assert trail.flush()
    before = scrape(admin)
    assert before["appliance_audit_entries_lost_total"] >= 0
    segment = trail_files(state_dir)[-1]       # the one being written: the newest
    subprocess.run(["chattr", "+i", segment], check=True)
    try:
        resp = admin.post("/v1/iam/organizations/", {"name": "while-immutable"})
        assert resp.status == 201, resp        # the request does not fail for its entry
        assert trail.flush()
    finally:
        subprocess.run(["chattr", "-i", segment], check=True)
    after_loss = scrape(admin)
    assert after_loss["appliance_audit_entries_lost_total"] == \
        before["appliance_audit_entries_lost_total"] + 1
    # the trail goes on in a new segment; the gauges say what is on disk
    resp = admin.post("/v1/iam/organizations/", {"name": "after-loss"})
    assert resp.status == 201, resp
    assert trail.flush()
    now = scrape(admin)
    files = trail_files(state_dir)
    assert len(files) >= 2
    assert now["appliance_audit_segments"] == len(files)
    assert now["appliance_audit_bytes"] == sum(os.path.getsize(p) for p in files)
    assert now["appliance_audit_entries_lost_total"] == \
        after_loss["appliance_audit_entries_lost_total"]
    listed = {e["request_id"] for e in admin.get("/v1/audit/").json}
    assert resp.header("X-Request-Id") in listed
