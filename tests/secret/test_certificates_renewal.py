"""Renewal against Pebble: certificates of a lifetime of one day and 20 seconds (Pebble
2.4's certificateValidityPeriod), so that a threshold of one day falls 20 s after the
issuance. The daemon's periodic tick is 10 minutes: a renewal seen here was scheduled for
its moment, not found by a poll."""

import datetime

import pytest

from appliance.secret.certificates import renew_at

from .pebble import CERTS, AcmeWorld
from .test_certificates_acme import leaf, names

LIFETIME = 86400 + 20


@pytest.fixture(scope="module")
def short_lived(server):
    world = AcmeWorld(None, api=server, validity_seconds=LIFETIME).start()
    yield world
    world.stop()


def test_renewed_when_within_the_threshold(short_lived):
    world = short_lived
    admin = world.admin()
    world.zone(admin, "renew.test")
    cert = world.certificate(admin, ["renew.test", "*.renew.test"], expiration_threshold=1)
    first = world.wait_status(admin, cert["uuid"], "ACTIVE")
    old = leaf(first["cert"])
    due = old.not_valid_after_utc - datetime.timedelta(days=1)
    assert due == renew_at(first["cert"], 1)
    # the renewal: a new order, a new key, a new certificate for the same names
    before = world.pebble.orders()
    renewed = world.wait_status(admin, cert["uuid"], "ACTIVE", timeout=60,
                                changed_from=first["cert"])
    new = leaf(renewed["cert"])
    assert names(renewed["cert"]) == {"renew.test", "*.renew.test"}
    assert renewed["key"] != first["key"]
    assert new.not_valid_after_utc > old.not_valid_after_utc
    assert renewed["expiration_at"] > first["expiration_at"]
    # issued once the threshold was reached, not before (Pebble backdates nothing)
    assert new.not_valid_before_utc >= due - datetime.timedelta(seconds=1)
    assert world.pebble.orders() == before + 1
    assert world.challenge_records() == []


def test_a_threshold_longer_than_the_lifetime_renews_at_half_life(short_lived):
    # 14 days (the default) against a lifetime of a day: renewed every half-life, not in
    # a loop right after each issuance
    world = short_lived
    admin = world.admin()
    world.zone(admin, "half.test")
    cert = world.certificate(admin, ["half.test"])
    done = world.wait_status(admin, cert["uuid"], "ACTIVE")
    assert done["expiration_threshold"] == 14
    start, end = leaf(done["cert"]).not_valid_before_utc, leaf(done["cert"]).not_valid_after_utc
    assert renew_at(done["cert"], 14) == start + (end - start) / 2
    orders = world.pebble.orders()
    resp = admin.put(f"{CERTS}/{cert['uuid']}", {"name": "renamed-half"})
    assert resp.status == 200
    assert world.wait_status(admin, cert["uuid"], "ACTIVE")["cert"] == done["cert"]
    assert world.pebble.orders() == orders
