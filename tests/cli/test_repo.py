"""`appliance repo ...` and `appliance elements ...` against the real API and builder."""

import pytest
import yaml

from tests.repo.conftest import manifest, write_manifest


DAEMONS = ('builder',)


@pytest.fixture
def cli(logged_in):
    """This module's tests talk to the real API (see conftest.real_api)."""
    return logged_in


def test_marketplace_round_trip(cli, tmp_path, monkeypatch):
    repo_dir = tmp_path / "repo"
    repo_dir.mkdir()
    write_manifest(repo_dir, manifest("shop", "1.0.0"))
    write_manifest(repo_dir, manifest("shop", "1.1.0"))
    write_manifest(repo_dir, manifest("shop", "2.0.0-dev.1"))
    monkeypatch.chdir(tmp_path)
    added = cli("--json", "repo", "add", "local", "--dir", "repo", "--wait")
    assert added.code == 0, added.stderr
    # the API reads the directory from its own working directory: the CLI sends it absolute
    assert added.json()["driver_spec"]["manifests_dir"] == str(repo_dir)
    assert added.json()["status"] == "ACTIVE"
    listed = cli("--json", "repo", "list")
    assert [r["name"] for r in listed.json()] == ["local"]
    available = cli("--json", "elements", "available")
    assert [(e["name"], e["version"]) for e in available.json()] == [("shop", "1.1.0")]
    with_dev = cli("--json", "elements", "available", "--dev")
    assert [e["version"] for e in with_dev.json()] == ["2.0.0-dev.1"]
    versions = cli("--json", "elements", "versions", "shop")
    assert [e["version"] for e in versions.json()] == ["1.0.0", "1.1.0"]
    installed = cli("--json", "elements", "install", "shop==1.0.0", "--wait")
    assert installed.code == 0, installed.stderr
    assert installed.json()["status"] == "ACTIVE" and "ACTIVE" in installed.stderr
    # an older version installed shows as installed beside the newest one offered
    assert [(e["name"], e["version"], e["installed"]) for e in
            cli("--json", "elements", "available").json()] == [("shop", "1.1.0", "1.0.0")]
    table = cli("elements", "available").stdout.splitlines()
    assert table[0].split() == ["UUID", "NAME", "VERSION", "INSTALLED", "DEVELOPMENT"]
    assert table[1].split()[1:] == ["shop", "1.1.0", "1.0.0", "false"]
    # upgrade names its target as install does; the old two-word form is refused, nothing sent
    cli.sent.clear()
    old_form = cli("elements", "upgrade", "shop", "1.1.0")
    assert old_form.code == 2 and cli.sent == []
    assert "NAME==VERSION" in old_form.stderr and "shop==1.1.0" in old_form.stderr
    same = cli("elements", "upgrade", "shop==1.0.0")
    assert same.code == 1 and "shop 1.0.0 is installed already" in same.stderr
    help_text = cli("elements", "upgrade", "--help").stdout
    assert "NAME[==VERSION]" in help_text and "appliance elements upgrade app==1.3.0" in help_text
    upgraded = cli("--json", "elements", "upgrade", "shop==1.1.0", "--wait")
    assert upgraded.code == 0 and upgraded.json()["version"] == "1.1.0"
    assert cli("--json", "elements", "available").json()[0]["installed"] == "1.1.0"
    gone = cli("--json", "elements", "uninstall", "shop", "--wait")
    assert gone.code == 0 and gone.json()["status"] == "AVAILABLE"
    write_manifest(repo_dir, manifest("shop", "1.2.0"))
    refreshed = cli("repo", "refresh", "local", "--wait")
    assert refreshed.code == 0, refreshed.stderr
    assert "1.2.0" in cli("elements", "versions", "shop").stdout


def test_upload_and_errors(cli, tmp_path):
    assert cli("repo", "add", "uploads", "--database", "--wait").code == 0
    path = tmp_path / "up.yaml"
    path.write_text(yaml.safe_dump(manifest("uploaded", "0.1.0")))
    result = cli("--json", "repo", "upload", "uploads", str(path))
    assert result.code == 0 and result.json()["name"] == "uploaded"
    assert cli("repo", "upload", "uploads", str(path)).code == 1     # already there
    missing = cli("elements", "install", "nothing-like-it")
    assert missing.code == 1 and "no element" in missing.stderr
