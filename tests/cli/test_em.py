"""`appliance em ...` against the real API and real builder daemon."""

import pytest
import yaml


MANIFEST = {
    "name": "cli_app", "version": "1.0.0",
    "resources": {"$core.secret.passwords": {"pw": {
        "name": "cli-app-pw", "project_id": "00000000-0000-0000-0000-000000000000"}}}}


DAEMONS = ('builder',)


@pytest.fixture
def cli(logged_in):
    """This module's tests talk to the real API (see conftest.real_api)."""
    return logged_in


def test_install_show_upgrade_uninstall(cli, tmp_path):
    v1 = tmp_path / "v1.yaml"
    v1.write_text(yaml.safe_dump(MANIFEST))
    installed = cli("--json", "em", "install", str(v1), "--wait")
    assert installed.code == 0, installed.stderr
    assert installed.json()["status"] == "ACTIVE"
    assert "secret.passwords.$pw ACTIVE" in installed.stderr
    again = cli("em", "install", str(v1))
    assert again.code == 1 and "already installed" in again.stderr
    shown = cli("em", "show", "cli_app")
    assert shown.code == 0 and "secret.passwords.$pw" in shown.stdout
    assert "ACTIVE" in shown.stdout
    listed = cli("--json", "em", "list")
    assert [e["name"] for e in listed.json()] == ["cli_app"]
    v2 = tmp_path / "v2.yaml"
    v2.write_text(yaml.safe_dump({**MANIFEST, "version": "1.1.0"}))
    upgraded = cli("--json", "em", "upgrade", str(v2), "--wait")
    assert upgraded.code == 0 and upgraded.json()["version"] == "1.1.0"
    gone = cli("em", "uninstall", "cli_app", "--wait")
    assert gone.code == 0 and "uninstalled" in gone.stdout
    assert cli("em", "show", "cli_app").code == 1


def test_bad_files(cli, tmp_path):
    missing = cli("em", "install", str(tmp_path / "nope.yaml"))
    assert missing.code == 2 and "cannot read" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    assert cli("em", "install", str(bad)).code == 2
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({"name": "x", "version": "1.0.0",
                                     "resources": {"$core.nothing.here": {"a": {}}}}))
    refused = cli("em", "install", str(wrong))
    assert refused.code == 1 and "$core.nothing.here" in refused.stderr
