"""Issuance failures: ERROR with the reason, retried with back-off, the daemon alive and
no TXT record left behind. Each case has its own state (one certificate daemon per store)."""

import time

import pytest

from tests.apiserver import free_port

from .pebble import CERTS, AcmeWorld


@pytest.fixture
def world(request, tmp_path):
    params = getattr(request, "param", {})
    w = AcmeWorld(str(tmp_path / "state"), **params).start()
    yield w
    w.stop()


def fails(world, domains, words):
    admin = world.admin()
    world.zone(admin, "err.test")
    cert = world.certificate(admin, domains)
    failed = world.wait_status(admin, cert["uuid"], "ERROR")
    for word in words:
        assert word in failed["status_reason"], failed["status_reason"]
    # retried with back-off (1 s, 2 s, 4 s in these tests): more than one try, and the
    # daemon never dies of it
    time.sleep(3.5)
    assert world.daemon.proc.poll() is None
    assert admin.get(f"{CERTS}/{cert['uuid']}").json["status"] in ("ERROR", "IN_PROGRESS")
    assert world.challenge_records() == []
    return admin, cert


@pytest.mark.parametrize("world", [{"blocked": ["blocked.err.test"]}], indirect=True)
def test_acme_refusal_is_error_with_the_reason(world):
    orders = world.pebble.orders()
    fails(world, ["blocked.err.test"], ["blocked.err.test"])
    assert world.pebble.orders() == orders          # refused at the order itself
    # a fix through the API is taken at once
    admin = world.admin()
    cert = world.certificate(admin, ["fine.err.test"])
    world.wait_status(admin, cert["uuid"], "ACTIVE")


@pytest.mark.parametrize("world", [{"daemon_settings": {
    "dns_port": free_port(), "acme_dns_wait_seconds": 1}}], indirect=True)
def test_our_dns_not_answering_in_time_is_error(world):
    fails(world, ["www.err.test"], ["did not answer", "_acme-challenge.www.err.test"])


@pytest.mark.parametrize("world", [{"daemon_settings": {
    "acme_directory_url": f"https://127.0.0.1:{free_port()}/dir"}}], indirect=True)
def test_an_unreachable_directory_is_error(world):
    fails(world, ["www.err.test"], ["unreachable"])


def test_a_directory_with_an_untrusted_certificate_is_error(world):
    # the daemon with the system's CAs (no acme_ca_bundle) against Pebble's own CA
    world.daemon.stop()
    world.daemon.extra_env.pop("APPLIANCE_ACME_CA_BUNDLE")
    world.daemon.start()
    fails(world, ["www.err.test"], ["TLS"])
