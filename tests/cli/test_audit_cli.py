"""`appliance audit list` against the real API."""

from __future__ import annotations

import uuid

from .conftest import ADMIN_PROJECT

AUDIT = "/v1/audit/"


def test_audit_list_filters_and_shows_who_did_what(logged_in):
    name = f"audited-{uuid.uuid4().hex[:8]}"
    made = logged_in("--json", "create", "secret/secrets", f"name={name}",
                     f"project_id={ADMIN_PROJECT}", "value=audit-cli-value")
    assert made.code == 0, made.stderr
    made = made.json()
    result = logged_in("--json", "audit", "list", "--actor", "admin", "--kind",
                       "secret_secrets", "--project", ADMIN_PROJECT, "--since",
                       "2000-01-01T00:00:00Z")
    assert result.code == 0, result.stderr
    sent = logged_in.transport.to(AUDIT)[-1]
    assert sent.method == "GET"
    assert [e["resource_uuid"] for e in result.json()] == [made["uuid"]]
    assert result.json()[0]["actor"]["name"] == "admin"
    # for people: one row per entry, the actor by name, never a value
    table = logged_in("audit", "list", "--kind", "secret_secrets")
    assert table.code == 0 and "admin" in table.stdout and "POST" in table.stdout
    assert "audit-cli-value" not in table.stdout


def test_audit_list_pages_and_refuses_a_bad_time(logged_in):
    page = logged_in("--json", "audit", "list", "--limit", "1")
    assert page.code == 0 and len(page.json()) == 1 and "--marker" in page.stderr
    every = logged_in("--json", "audit", "list", "--all", "--limit", "2")
    assert every.code == 0 and len(every.json()) >= 2
    bad = logged_in("audit", "list", "--since", "yesterday")
    assert bad.code == 1 and "RFC 3339" in bad.stderr
