"""`appliance dns domains|records ...` against the real API."""

import pytest


@pytest.fixture
def cli(logged_in):
    """This module's tests talk to the real API (see conftest.real_api)."""
    return logged_in


def test_domains_and_records(cli):
    made = cli("--json", "dns", "domains", "create", "name=cli.test",
               "project_id=00000000-0000-0000-0000-000000000000")
    assert made.code == 0, made.stderr
    record = cli("--json", "dns", "records", "create", "cli.test", "type=A",
                 'record:={"kind": "A", "name": "www", "address": "10.1.2.3"}')
    assert record.code == 0, record.stderr
    listed = cli("--json", "dns", "records", "list", "cli.test")
    assert sorted(r["type"] for r in listed.json()) == ["A", "SOA"]
    shown = cli("--json", "dns", "records", "show", "cli.test", record.json()["uuid"])
    assert shown.json()["record"]["address"] == "10.1.2.3"
    bad = cli("dns", "records", "create", "cli.test", "type=A",
              'record:={"kind": "A", "name": "www", "address": "10.1.2.300"}')
    assert bad.code == 1 and "address" in bad.stderr
    assert cli("dns", "records", "delete", "cli.test", record.json()["uuid"]).code == 0
    assert cli("dns", "records", "list", "nope.test").code == 1
