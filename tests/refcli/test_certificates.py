"""`exordos secret certificates ...` (the reference CLI) against our appliance. No order
reaches an ACME directory: the appliance under test has the default (Let's Encrypt), so
the certificates here are manual, or for a name in none of our zones (ERROR at once,
without an ACME call)."""

import uuid

from appliance.iam.builtin import ADMIN_PROJECT
from tests.secret.conftest import remember, wait_for
from tests.secret.test_certificates_api import key_pair, self_signed

from .test_session import SETTLE, named, shown


def test_certificates_as_the_reference_cli_makes_them(exordos, tmp_path):
    key, key_pem = key_pair()
    remember(key_pem)
    (tmp_path / "key.pem").write_text(key_pem)
    (tmp_path / "cert.pem").write_text(self_signed(key, "ref.manual.test"))
    given = str(uuid.uuid4())
    exordos.ok("secret", "certificates", "add", "-u", given, "-p", ADMIN_PROJECT,
               "-n", "refcli-manual", "-e", "ops@example.org", "-d", "ref.manual.test",
               "-m", "manual", "--cert", str(tmp_path / "cert.pem"), "--key",
               str(tmp_path / "key.pem"))
    row = named(exordos.json("secret", "certificates", "list"), "refcli-manual")
    assert row["uuid"] == given and row["domains"] == "ref.manual.test"
    detail = shown(exordos.json("secret", "certificates", "show", given))
    assert detail["expiration_at"].startswith("2031-01-02")
    assert wait_for(lambda: shown(exordos.json("secret", "certificates", "show", given))[
        "status"] == "ACTIVE", SETTLE)
    # dns_core, the reference's default, for a name in none of our zones
    exordos.ok("secret", "certificates", "add", "-p", ADMIN_PROJECT, "-n", "refcli-acme",
               "-e", "ops@example.org", "-d", "www.nowhere.test", "-d", "*.nowhere.test")
    row = named(exordos.json("secret", "certificates", "list"), "refcli-acme")
    assert row["domains"] == "www.nowhere.test, *.nowhere.test"
    failed = wait_for(lambda: (lambda d: d if d["status"] == "ERROR" else None)(
        shown(exordos.json("secret", "certificates", "show", row["uuid"]))), SETTLE)
    assert "www.nowhere.test" in failed["status_reason"]
    # update sends the project_id again, unchanged (reference-api.md section 0)
    exordos.ok("secret", "certificates", "update", row["uuid"], "-p", ADMIN_PROJECT,
               "-D", "renamed", "-d", "api.nowhere.test")
    detail = shown(exordos.json("secret", "certificates", "show", row["uuid"]))
    assert detail["description"] == "renamed" and "api.nowhere.test" in detail["domains"]
    exordos.ok("secret", "certificates", "delete", "-y", row["uuid"])
    exordos.ok("secret", "certificates", "delete", "-y", given)
    assert [r for r in exordos.json("secret", "certificates", "list")
            if r["name"].startswith("refcli-")] == []
