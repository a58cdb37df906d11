"""The TXT answer size of one name under concurrency: records of one name written at
once, each small enough alone and too large together, through the real API on loopback.
The check and the write are under one lock per domain (dns/resources.py): exactly one
is made, every other gets the 409 that names the name, nothing 500s."""

import uuid

import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from tests.configs.test_path_collisions import race

RACERS = 6


@pytest.fixture(scope="module")
def records(admin):
    domain = admin.post("/v1/dns/domains", {"name": "txt-race.test",
                                            "project_id": ADMIN_PROJECT})
    assert domain.status == 201, domain
    return f"/v1/dns/domains/{domain.json['uuid']}/records"


def txt(name, content, **fields):
    """The reference's body."""
    return {"type": "TXT", "ttl": 3600, "record": {"kind": "TXT", "name": name,
                                                   "content": content}, **fields}


def of_name(admin, records, name):
    return [r for r in admin.get(records).json
            if r["type"] == "TXT" and r["record"]["name"] == name]


def assert_one_won(replies, name, ok):
    assert sorted(r.status for r in replies) == [ok] + [409] * (len(replies) - 1), replies
    for r in replies:
        if r.status == 409:
            assert r.json["type"] == "Conflict", r.json
            assert r.json["message"].startswith(f"record.content: the 2 TXT records of "
                                                f"{name} would take ")


@pytest.mark.parametrize("round_", range(2))
def test_concurrent_creates_that_overflow_one_answer_make_one(admin, records, round_):
    name = f"race-{uuid.uuid4().hex[:8]}"
    replies = race([lambda i=i: admin.post(records, txt(name, chr(97 + i) * 40000))
                    for i in range(RACERS)])
    assert_one_won(replies, name, 201)
    assert [r["uuid"] for r in of_name(admin, records, name)] == \
        [r.json["uuid"] for r in replies if r.status == 201]


def test_concurrent_enables_that_overflow_one_answer_leave_one(admin, records):
    name = f"park-{uuid.uuid4().hex[:8]}"
    parked = [admin.post(records, txt(name, chr(97 + i) * 40000, disabled=True)).json
              for i in range(RACERS)]
    replies = race([lambda p=p: admin.put(f"{records}/{p['uuid']}", {"disabled": False})
                    for p in parked])
    assert_one_won(replies, name, 200)
    enabled = [r for r in of_name(admin, records, name) if not r["disabled"]]
    assert [r["uuid"] for r in enabled] == [r.json["uuid"] for r in replies
                                            if r.status == 200]
