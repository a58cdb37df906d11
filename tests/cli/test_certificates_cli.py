"""`appliance secret certificates ...` against the real API; --wait against the real
certificate daemon and Pebble (tests/secret/pebble.py)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization

from tests.secret.pebble import AcmeWorld
from tests.secret.test_certificates_api import key_pair, self_signed

from .conftest import ADMIN_PROJECT

C = "/v1/secret/certificates/"


@pytest.fixture(scope="module")
def world(real_api):
    w = AcmeWorld(None, api=real_api).start()
    yield w
    w.stop()


def test_add_list_show_update_delete(logged_in):
    added = logged_in("--json", "secret", "certificates", "add", "-p", ADMIN_PROJECT,
                      "-e", "ops@example.org", "-d", "www.cli.test", "-d", "*.cli.test")
    assert added.code == 0, added.stderr
    # the reference CLI's body, with its default name
    assert logged_in.transport.to(C)[-1].body == {
        "project_id": ADMIN_PROJECT, "name": "test_certificate", "email": "ops@example.org",
        "domains": ["www.cli.test", "*.cli.test"]}
    cert = added.json()
    assert cert["method"] == {"kind": "dns_core"} and cert["status"] == "NEW"
    listed = logged_in("secret", "certificates", "list")
    assert listed.code == 0
    header, row = listed.stdout.splitlines()[:2]
    assert set(header.split()) >= {"UUID", "PROJECT_ID", "NAME", "EMAIL", "DOMAINS", "STATUS"}
    assert "www.cli.test, *.cli.test" in row and cert["uuid"] in row
    shown = logged_in("--json", "secret", "certificates", "show", "test_certificate")
    assert shown.json()["uuid"] == cert["uuid"]
    updated = logged_in("--json", "secret", "certificates", "update", "test_certificate",
                        "-d", "api.cli.test", "--threshold", "30", "-D", "for the api")
    assert updated.code == 0, updated.stderr
    assert logged_in.transport.to(C + cert["uuid"])[-1].body == {
        "domains": ["api.cli.test"], "expiration_threshold": 30, "description": "for the api"}
    assert updated.json()["domains"] == ["api.cli.test"]
    assert logged_in("secret", "certificates", "delete", cert["uuid"]).code == 0
    assert logged_in("--json", "secret", "certificates", "list").json() == []


def test_manual_from_files_and_hidden_key(logged_in, tmp_path):
    key, key_pem = key_pair()
    (tmp_path / "key.pem").write_text(key_pem)
    (tmp_path / "cert.pem").write_text(self_signed(key, "manual.cli.test"))
    added = logged_in("--json", "secret", "certificates", "add", "-n", "up", "-p", ADMIN_PROJECT,
                      "-d", "manual.cli.test", "-m", "manual", "--cert",
                      str(tmp_path / "cert.pem"), "--key", str(tmp_path / "key.pem"))
    assert added.code == 0, added.stderr
    assert added.json()["key"] == key_pem and added.json()["expiration_at"]
    shown = logged_in("secret", "certificates", "show", "up")
    assert "PRIVATE KEY" not in shown.stdout and "(hidden)" in shown.stdout
    assert "PRIVATE KEY" in logged_in("secret", "certificates", "show", "up",
                                      "--show-values").stdout
    # another key than the cert's: the API's message, exit 1, nothing changed
    _, other = key_pair()
    (tmp_path / "other.pem").write_text(other)
    refused = logged_in("secret", "certificates", "update", "up", "--key",
                        str(tmp_path / "other.pem"))
    assert refused.code == 1 and "not for this key" in refused.stderr
    assert logged_in("--json", "secret", "certificates", "show", "up").json()["key"] == \
        key_pem
    assert serialization.load_pem_private_key(key_pem.encode(), None)
    assert logged_in("secret", "certificates", "delete", "up").code == 0


def test_bad_input(logged_in, tmp_path):
    no_domains = logged_in("secret", "certificates", "add", "-e", "ops@example.org")
    assert no_domains.code == 2 and "domains" in no_domains.stderr
    _, key_pem = key_pair()
    (tmp_path / "key.pem").write_text(key_pem)
    with_key = logged_in("secret", "certificates", "add", "-p", ADMIN_PROJECT, "-d", "a.cli.test",
                         "--key",
                         str(tmp_path / "key.pem"))
    assert with_key.code == 1 and "only for manual" in with_key.stderr
    bad = logged_in("secret", "certificates", "add", "-p", ADMIN_PROJECT,
                    "-d", "bad..cli.test")
    assert bad.code == 1 and "domains" in bad.stderr
    missing = logged_in("secret", "certificates", "add", "-d", "a.cli.test", "--cert",
                        str(tmp_path / "none.pem"))
    assert missing.code == 2
    nothing = logged_in("secret", "certificates", "update", "nope")
    assert nothing.code != 0
    assert logged_in("--json", "secret", "certificates", "list").json() == []


def test_add_and_wait_until_issued(logged_in, world):
    zone = logged_in("--json", "dns", "domains", "create", "name=wait.test",
                     f"project_id={ADMIN_PROJECT}")
    assert zone.code == 0, zone.stderr
    result = logged_in("--json", "secret", "certificates", "add", "-n", "waited", "-p", ADMIN_PROJECT,
                       "-d", "wait.test", "www.wait.test", "--wait", "--wait-timeout", "60")
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE" and "BEGIN CERTIFICATE" in result.json()["cert"]
    assert "ACTIVE" in result.stderr
    outside = logged_in("secret", "certificates", "add", "-n", "outside", "-p", ADMIN_PROJECT,
                        "-d", "www.nowhere.test", "--wait", "--wait-timeout", "60")
    assert outside.code == 1 and "www.nowhere.test" in outside.stderr
