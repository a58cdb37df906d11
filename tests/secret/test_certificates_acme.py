"""Certificates issued through ACME DNS-01 on our own DNS, against a real Pebble resolving
through our real DNS daemon, with the real certificate daemon (tests/secret/pebble.py)."""

import datetime
import time

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from appliance.secret.crypto import SecretBox

from .conftest import remember
from .pebble import CERTS


def leaf(cert_pem):
    return x509.load_pem_x509_certificates(cert_pem.encode())[0]


def names(cert_pem):
    san = leaf(cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return set(san.value.get_values_for_type(x509.DNSName))


def key_matches(key_pem, cert_pem):
    key = serialization.load_pem_private_key(key_pem.encode(), None)
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key.public_key().public_bytes(*spki) == leaf(cert_pem).public_key().public_bytes(
        *spki)


def test_issuance_end_to_end(acme_world, server):
    admin = acme_world.admin()
    acme_world.zone(admin, "shop.test")
    cert = acme_world.certificate(admin, ["www.shop.test"])
    assert cert["status"] == "NEW" and cert["cert"] is None and cert["key"] is None
    done = acme_world.wait_status(admin, cert["uuid"], "ACTIVE")
    assert names(done["cert"]) == {"www.shop.test"}
    chain = x509.load_pem_x509_certificates(done["cert"].encode())
    assert len(chain) >= 2                                      # leaf and intermediate
    root = x509.load_pem_x509_certificate(acme_world.pebble.root_pem().encode())
    chain[-1].verify_directly_issued_by(root)                  # up to Pebble's root
    chain[0].verify_directly_issued_by(chain[1])
    assert key_matches(done["key"], done["cert"])
    remember(done["key"])       # tests/secret/test_zz_logs.py: in no log of the run
    assert done["status_reason"] is None
    expires = datetime.datetime.fromisoformat(done["expiration_at"].replace("Z", "+00:00"))
    assert expires == leaf(done["cert"]).not_valid_after_utc
    # the key is sealed in the store, like every other secret's sensitive field
    stored = server.store.collection("secret_certificates").get(cert["uuid"])
    assert "PRIVATE KEY" not in stored["key"]
    assert SecretBox(server.store).open("secret_certificates", cert["uuid"], "key",
                                        stored["key"]) == done["key"]
    assert acme_world.challenge_records() == []


def test_a_wildcard_with_its_base_name(acme_world):
    admin = acme_world.admin()
    acme_world.zone(admin, "wild.test")
    cert = acme_world.certificate(admin, ["*.wild.test", "wild.test"])
    done = acme_world.wait_status(admin, cert["uuid"], "ACTIVE")
    assert names(done["cert"]) == {"*.wild.test", "wild.test"}
    assert acme_world.challenge_records() == []


def test_the_longest_zone_suffix_takes_the_challenge(acme_world, server):
    admin = acme_world.admin()
    acme_world.zone(admin, "outer.test")
    inner = acme_world.zone(admin, "inner.outer.test")
    seen = []
    records = server.store.collection("dns_records")
    cert = acme_world.certificate(admin, ["a.inner.outer.test"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen += [(r["domain"], r["record"]["name"], r["ttl"]) for r in records.records()
                 if r["type"] == "TXT" and r["record"]["name"].startswith("_acme")]
        if admin.get(f"{CERTS}/{cert['uuid']}").json["status"] == "ACTIVE":
            break
        time.sleep(0.01)
    assert (inner["uuid"], "_acme-challenge.a", 0) in seen
    assert {s[0] for s in seen} == {inner["uuid"]}


def test_a_domain_outside_our_zones_is_error_and_no_order(acme_world):
    admin = acme_world.admin()
    acme_world.zone(admin, "ours.test")
    before = acme_world.pebble.orders()
    cert = acme_world.certificate(admin, ["www.ours.test", "www.elsewhere.test"])
    failed = acme_world.wait_status(admin, cert["uuid"], "ERROR")
    assert "www.elsewhere.test" in failed["status_reason"]
    assert "www.ours.test" not in failed["status_reason"]
    # never an order while the domain stays outside, whatever else changes
    acme_world.zone(admin, "unrelated.test")
    assert admin.put(f"{CERTS}/{cert['uuid']}", {"description": "again"}).status == 200
    failed = acme_world.wait_status(admin, cert["uuid"], "ERROR")
    assert "www.elsewhere.test" in failed["status_reason"]
    assert acme_world.pebble.orders() == before
    # the zone created: the pass it brings issues it (no timer is left for a missing
    # zone, and the daemon's periodic tick is 10 minutes)
    acme_world.zone(admin, "elsewhere.test")
    acme_world.wait_status(admin, cert["uuid"], "ACTIVE")


def test_delete_leaves_no_txt_record(acme_world, server):
    admin = acme_world.admin()
    acme_world.zone(admin, "gone.test")
    cert = acme_world.certificate(admin, ["a.gone.test", "b.gone.test"])
    records = server.store.collection("dns_records")
    deadline = time.monotonic() + 30
    # deleted mid-order: once its challenge records are in our zone
    while not [r for r in records.records() if r["type"] == "TXT"
               and r["record"]["name"].startswith("_acme-challenge")]:
        assert time.monotonic() < deadline, "no challenge record seen"
        time.sleep(0.005)
    assert admin.delete(f"{CERTS}/{cert['uuid']}").status == 204
    deadline = time.monotonic() + 30
    while acme_world.challenge_records():
        assert time.monotonic() < deadline, acme_world.challenge_records()
        time.sleep(0.05)
    # and a certificate deleted once ACTIVE leaves none either
    other = acme_world.certificate(admin, ["c.gone.test"])
    acme_world.wait_status(admin, other["uuid"], "ACTIVE")
    assert admin.delete(f"{CERTS}/{other['uuid']}").status == 204
    assert acme_world.challenge_records() == []
    assert server.store.collection("secret_certificates").get(cert["uuid"]) is None


def test_a_put_of_domains_issues_again(acme_world):
    admin = acme_world.admin()
    acme_world.zone(admin, "change.test")
    cert = acme_world.certificate(admin, ["a.change.test"])
    first = acme_world.wait_status(admin, cert["uuid"], "ACTIVE")
    # a PUT of another field only: ACTIVE again with the same certificate, no order
    before = acme_world.pebble.orders()
    resp = admin.put(f"{CERTS}/{cert['uuid']}", {"description": "renamed"})
    assert resp.status == 200 and resp.json["status"] == "NEW"
    same = acme_world.wait_status(admin, cert["uuid"], "ACTIVE")
    assert same["cert"] == first["cert"] and acme_world.pebble.orders() == before
    resp = admin.put(f"{CERTS}/{cert['uuid']}", {"domains": ["a.change.test",
                                                             "b.change.test"]})
    assert resp.status == 200 and resp.json["status"] == "NEW"
    again = acme_world.wait_status(admin, cert["uuid"], "ACTIVE", changed_from=first["cert"])
    assert names(again["cert"]) == {"a.change.test", "b.change.test"}
    assert again["key"] != first["key"]


def test_one_account_per_directory_and_email_its_key_sealed(acme_world, server):
    admin = acme_world.admin()
    acme_world.zone(admin, "account.test")
    for email in ("ops@example.org", "other@example.org"):
        cert = acme_world.certificate(admin, ["account.test"], email=email)
        acme_world.wait_status(admin, cert["uuid"], "ACTIVE")
    accounts = server.store.collection("secret_acme_accounts").records()
    # the earlier tests' orders (all ops@example.org) reused one account
    assert sorted(a["email"] for a in accounts) == ["ops@example.org", "other@example.org"]
    for account in accounts:
        assert account["directory"] == acme_world.pebble.url and account["uri"]
        assert "PRIVATE KEY" not in account["key"]
        opened = SecretBox(server.store).open("secret_acme_accounts", account["uuid"], "key",
                                              account["key"])
        assert "PRIVATE KEY" in remember(opened)
