"""How long the trail is kept (size and age), its settings' checks, and what happens when
an entry cannot be written: the request still succeeds, the loss is logged and counted."""

import logging
import os
import time

import pytest

from appliance import config
from appliance.api.audit import Trail
from tests.audit.conftest import trail_files


def entry(i):
    return {"uuid": f"{i:08d}-0000-4000-8000-000000000000", "created_at": f"t{i:08d}",
            "method": "POST", "path": "/v1/secret/secrets", "padding": "x" * 200}


def write(trail, start, count):
    for i in range(start, start + count):
        trail.record(entry(i))
    assert trail.flush()


def sizes(directory):
    return [os.path.getsize(p) for p in trail_files(directory)]


def test_the_trail_stays_under_its_size_dropping_the_oldest_segments(tmp_path):
    trail = Trail(str(tmp_path), max_bytes=16384, retention_seconds=86400.0,
                  segment_bytes=4096)
    try:
        for start in range(0, 300, 10):      # batches: several writes, several segments
            write(trail, start, 10)
        kept = [e["uuid"] for e in trail.entries()]
    finally:
        trail.close()
    assert len(sizes(tmp_path)) > 2 and all(s <= 4096 for s in sizes(tmp_path))
    assert sum(sizes(tmp_path)) <= 16384
    # the newest are kept, in order, and the oldest are gone
    assert kept[-1] == entry(299)["uuid"] and entry(0)["uuid"] not in kept
    assert kept == sorted(kept) and len(kept) >= 30


def test_segments_older_than_the_retention_are_removed(tmp_path):
    trail = Trail(str(tmp_path), max_bytes=1 << 20, retention_seconds=3600.0,
                  segment_bytes=4096)
    try:
        for start in range(0, 40, 5):
            write(trail, start, 5)
        old = trail_files(tmp_path)
        assert len(old) >= 2
        past = time.time() - 7200
        for path in old:
            os.utime(path, (past, past))
        write(trail, 40, 1)
        trail.prune()      # the writer does it at each new segment and once a minute
        kept = [e["uuid"] for e in trail.entries()]
    finally:
        trail.close()
    # every old segment but the one still being written is gone
    assert [p for p in old if os.path.exists(p)] == old[-1:]
    assert entry(0)["uuid"] not in kept and entry(40)["uuid"] in kept


@pytest.mark.parametrize("settings, complaint", [
    ({"audit_segment_bytes": 100}, "audit_segment_bytes must be 4096 or more"),
    ({"audit_max_bytes": 8192, "audit_segment_bytes": 16384}, "must be at least"),
    ({"audit_retention_days": 0}, "audit_retention_days must be more than 0"),
    ({"audit_max_bytes": "lots"}, "audit_max_bytes must be an integer"),
])
def test_bad_settings_are_refused_saying_why(tmp_path, settings, complaint):
    with pytest.raises(config.ConfigError, match=complaint):
        config.load(environ={}, overrides={"state_dir": str(tmp_path), **settings})


def test_settings_come_from_the_environment(tmp_path):
    settings = config.load(environ={"APPLIANCE_AUDIT_RETENTION_DAYS": "7",
                                    "APPLIANCE_AUDIT_MAX_BYTES": "1048576",
                                    "APPLIANCE_AUDIT_SEGMENT_BYTES": "65536"},
                           overrides={"state_dir": str(tmp_path)})
    assert (settings["audit_retention_days"], settings["audit_max_bytes"]) == (7.0, 1048576)


def test_a_lost_entry_fails_no_request_and_is_logged_and_counted(fresh_server, caplog):
    admin = fresh_server.client(fresh_server.login("admin", "admin-password-for-tests"))
    trail = fresh_server.api.trail
    assert trail.flush()
    before = trail.lost
    directory, trail.directory = trail.directory, os.path.join(trail.directory, "gone", "x")
    trail._segment = None
    try:
        with caplog.at_level(logging.ERROR, logger="appliance.audit"):
            resp = admin.post("/v1/iam/organizations/", {"name": "while-lost"})
            assert resp.status == 201, resp
            assert trail.flush()
    finally:
        trail.directory, trail._segment = directory, None
    assert trail.lost == before + 1
    assert any("1 entry lost" in r.getMessage() for r in caplog.records)
    # the trail works again once it can write
    resp = admin.post("/v1/iam/organizations/", {"name": "after-lost"})
    listed = {e["request_id"] for e in admin.get("/v1/audit/").json}
    assert resp.header("X-Request-Id") in listed
