"""A session of the reference CLI (`exordos`, from PyPI) against a real appliance: login,
passwords, DNS, elements installed from a file, and the IAM calls it makes on the way.

Every step runs the real program in a subprocess and reads what it prints (`-o json`
where it offers it); the appliance is `appliance up` with all its daemons.
"""

import json
import os
import time

import dns.message
import dns.query
import jwt
import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from tests.conftest import SECRET_VALUES
from tests.secret.conftest import wait_for

from .conftest import PIP_TIMEOUT, Exordos

MANIFEST = os.path.join(os.path.dirname(__file__), "hello-element.yaml")
# the daemons act within milliseconds; `exordos` itself polls every 2 s
SETTLE = 60

# the first test of the module may install exordos from PyPI (pip has its own bound)
pytestmark = pytest.mark.timeout(PIP_TIMEOUT + 300)


def named(rows, name):
    found = [r for r in rows if r.get("name") == name]
    assert len(found) == 1, (name, rows)
    return found[0]


def shown(rows):
    """`show -o json` prints a table of {field, value} rows, values as text."""
    return {row["field"]: row["value"] for row in rows}


def cached_tokens(exordos, scope=""):
    with open(exordos.token_cache) as f:
        return json.load(f)[f"appliance_admin_{scope}"]


def lifetime(token):
    claims = jwt.decode(token, options={"verify_signature": False})
    return claims["exp"] - claims["iat"]


def test_login_with_the_reference_clis_lifetimes(exordos, appliance):
    # exordos asks for ttl=14400 and refresh_ttl=86400: the appliance lowers the first to
    # its maximum (3600) instead of refusing the login
    result = exordos.ok("iam", "introspect")
    assert "Project: None" in result.stdout and "*.*.*" in result.stdout
    tokens = cached_tokens(exordos)
    assert lifetime(tokens["access_token"]) == 3600
    assert lifetime(tokens["refresh_token"]) == 86400
    # a project scope, as `-P` asks for it
    scoped = exordos.ok("-P", ADMIN_PROJECT, "iam", "introspect")
    assert f"Project: {ADMIN_PROJECT}" in scoped.stdout
    assert cached_tokens(exordos, f"project:{ADMIN_PROJECT}")["access_token"]


def test_an_expired_token_is_refreshed_by_the_cli(exordos):
    # --ttl takes a float: 1.5 s becomes a 2 s token; once it expired, exordos gets a 401,
    # refreshes with its cached refresh token and repeats the call
    os.remove(exordos.token_cache)
    exordos.ok("--ttl", "1.5", "iam", "introspect")
    first = cached_tokens(exordos)
    assert lifetime(first["access_token"]) == 2
    time.sleep(2.5)
    again = exordos.ok("iam", "introspect")
    assert "*.*.*" in again.stdout
    assert cached_tokens(exordos)["access_token"] != first["access_token"]


def test_passwords_add_show_and_list(exordos):
    added = exordos.ok("secret", "passwords", "add", "-p", ADMIN_PROJECT, "-n", "refcli-pw",
                       "--tag", "ci", "--tag", "refcli")
    assert "refcli-pw" in added.stdout
    listed = named(exordos.json("secret", "passwords", "list"), "refcli-pw")
    assert listed["method"] == "AUTO_HEX"
    # the delivery daemon moves it to ACTIVE once the value is on the data plane
    wait_for(lambda: named(exordos.json("secret", "passwords", "list"),
                           "refcli-pw")["status"] == "ACTIVE", timeout=SETTLE, interval=0.5)
    detail = shown(exordos.json("secret", "passwords", "show", listed["uuid"]))
    assert detail["name"] == "refcli-pw" and detail["tags"] == "['ci', 'refcli']"
    assert len(detail["value"]) == 32 and detail["status"] == "ACTIVE"
    tagged = exordos.json("secret", "passwords", "list", "-f", "tags=refcli")
    assert [p["uuid"] for p in tagged] == [listed["uuid"]]
    # a second password of that name in the project: our 409, which exordos reports
    again = exordos("secret", "passwords", "add", "-p", ADMIN_PROJECT, "-n", "refcli-pw")
    assert again.returncode == 1 and "Already exists" in again.stderr
    assert len([p for p in exordos.json("secret", "passwords", "list")
                if p["name"] == "refcli-pw"]) == 1


def test_secrets_and_rsa_keys_as_the_reference_cli_makes_them(exordos):
    # neither sends what our API used to require: no constructor, no key size
    value = "refcli-secret-value-0c5e"
    SECRET_VALUES.add(value)
    exordos.ok("secret", "secrets", "add", "-p", ADMIN_PROJECT, "-n", "refcli-secret",
               "-v", value, "--tag", "ci")
    secret = named(exordos.json("secret", "secrets", "list"), "refcli-secret")
    detail = shown(exordos.json("secret", "secrets", "show", secret["uuid"]))
    assert detail["constructor"] == "{'kind': 'plain'}" and detail["value"] == value
    assert detail["tags"] == "['ci']"
    exordos.ok("secret", "rsa_keys", "add", "-p", ADMIN_PROJECT, "-n", "refcli-rsa")
    key = named(exordos.json("secret", "rsa_keys", "list"), "refcli-rsa")
    detail = shown(exordos.json("secret", "rsa_keys", "show", key["uuid"]))
    assert detail["bitness"] == "2048"
    assert detail["private_key"].startswith("-----BEGIN PRIVATE KEY-----")


def test_dns_domains_and_records(exordos, appliance):
    exordos.ok("dns", "domains", "add", "-p", ADMIN_PROJECT, "-n", "refcli.test",
               "--tag", "ci")
    domain = named(exordos.json("dns", "domains", "list"), "refcli.test")
    # an ACME challenge, as certificate clients publish it: ttl 0
    exordos.ok("dns", "records", "add", "-p", ADMIN_PROJECT, "-d", domain["uuid"],
               "--record-type", "TXT", "--ttl", "0", "--record", "name=_acme-challenge",
               "--record", "content=challenge-token")
    exordos.ok("dns", "records", "add", "-p", ADMIN_PROJECT, "-d", domain["uuid"],
               "--record-type", "A", "--record", "name=www", "--record", "address=10.9.8.7")
    records = exordos.json("dns", "records", "list", "--domain-uuid", domain["uuid"])
    assert sorted(r["type"] for r in records) == ["A", "SOA", "TXT"]
    assert [r["ttl"] for r in records if r["type"] == "TXT"] == ["0"]
    # and the appliance's DNS server answers them, the challenge with ttl 0
    query = dns.message.make_query("_acme-challenge.refcli.test", "TXT")

    def answered():
        try:
            reply = dns.query.udp(query, "127.0.0.1", port=appliance.dns_port, timeout=1)
        except dns.exception.Timeout:
            return None
        return reply.answer or None
    answer = wait_for(answered, timeout=SETTLE, interval=0.2)
    assert [rrset.ttl for rrset in answer] == [0] and "challenge-token" in str(answer[0])
    # a bad record: the CLI shows the server's 400 and nothing is added
    bad = exordos("dns", "records", "add", "-p", ADMIN_PROJECT, "-d", domain["uuid"],
                  "--record-type", "A", "--ttl", "-1", "--record", "name=bad",
                  "--record", "address=10.9.8.6")
    assert bad.returncode == 1 and "[400]" in bad.stderr and "ttl" in bad.stderr
    assert len(exordos.json("dns", "records", "list", "--domain-uuid", domain["uuid"])) == 3


def test_elements_install_from_a_file_list_and_uninstall(exordos):
    installed = exordos.ok("ee", "install", MANIFEST)
    assert "refcli_hello (1.0.0) was installed successfully" in installed.stdout

    def element():
        rows = exordos.json("ee", "list")
        return rows[0] if rows and rows[0]["status"] == "ACTIVE" else None
    active = wait_for(element, timeout=SETTLE, interval=0.5)
    assert (active["name"], active["version"]) == ("refcli_hello", "1.0.0")
    # what the manifest declares exists
    assert named(exordos.json("secret", "passwords", "list"), "refcli-hello-greeting")
    assert named(exordos.json("dns", "domains", "list"), "refcli-hello.test")
    # installing it again: exordos finds the element already uploaded and gives up
    again = exordos("ee", "install", MANIFEST)
    assert again.returncode == 1 and "[409]" in again.stderr

    removed = exordos.ok("ee", "uninstall", "-y", "refcli_hello")
    assert "refcli_hello was uninstalled successfully" in removed.stdout
    wait_for(lambda: exordos.json("ee", "list") == [], timeout=SETTLE, interval=0.5)
    assert "refcli-hello-greeting" not in {
        p["name"] for p in exordos.json("secret", "passwords", "list")}
    assert "refcli-hello.test" not in {d["name"] for d in exordos.json("dns", "domains", "list")}
    # the element stays in the upload repository, uninstalled
    kept = named(exordos.json("repo", "elements", "list"), "refcli_hello")
    assert kept["installation state"] == "UNINSTALLED"


def test_change_password_with_the_old_one(exordos, appliance, tmp_path):
    # another user of the same account, logged in elsewhere before the change
    (tmp_path / "home").mkdir()
    elsewhere = Exordos(exordos.program, str(tmp_path / "home"), appliance.url, str(tmp_path),
                        appliance.admin_password)
    elsewhere.ok("iam", "introspect")
    before = cached_tokens(elsewhere)["access_token"]
    admin = named([dict(u, name=u["username"]) for u in exordos.json("iam", "users", "list")],
                  "admin")
    wrong = exordos("iam", "users", "change_password", admin["uuid"], "-o", "not-it",
                    "-n", "a-new-admin-password")
    assert wrong.returncode == 1 and "[403]" in wrong.stderr
    assert "old_password" in wrong.stderr
    exordos.ok("iam", "users", "change_password", admin["uuid"],
               "-o", appliance.admin_password, "-n", "a-new-admin-password")
    try:
        # the session that made the change goes on
        assert "*.*.*" in exordos.ok("iam", "introspect").stdout
        # the other one ended: its refresh is refused as "expired", and exordos then logs
        # in again with the password of its config, now the new one
        elsewhere.set_realm(appliance.url, "admin", "a-new-admin-password")
        assert "*.*.*" in elsewhere.ok("iam", "introspect").stdout
        assert cached_tokens(elsewhere)["access_token"] != before
        # a fresh login with the old password fails
        os.remove(exordos.token_cache)
        stale = exordos("iam", "introspect")
        assert stale.returncode == 1 and "invalid_grant" in stale.stderr
    finally:
        exordos.set_realm(appliance.url, "admin", "a-new-admin-password")
        exordos.ok("iam", "users", "change_password", admin["uuid"], "-o",
                   "a-new-admin-password", "-n", appliance.admin_password)
        exordos.set_realm(appliance.url, "admin", appliance.admin_password)
        assert "*.*.*" in exordos.ok("iam", "introspect").stdout
