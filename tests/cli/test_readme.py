"""The README's first session, command by command, through the CLI against the real API.

The commands are read from README.md itself, so the README cannot name a file that does not
exist or a form the CLI no longer takes without this test failing.
"""

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ADMIN_PASSWORD

from .conftest import Cli

ROOT = Path(__file__).resolve().parents[2]
DAEMONS = ("builder", "delivery")


def readme_commands():
    """The argument lists of the README's `.venv/bin/appliance ...` lines, comments dropped."""
    commands = []
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith(".venv/bin/appliance "):
            text = line.split("#", 1)[0]
            commands.append(shlex.split(text)[1:])
    return commands


def test_the_readme_session_works_on_a_fresh_appliance(real_api, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the README runs from the repository's root
    commands = readme_commands()
    assert ["em", "install", "examples/hello-1.0.0.yaml", "--wait"] in commands
    # No APPLIANCE_ENDPOINT: login must find the API by the variables `appliance up` reads.
    cli = Cli(tmp_path / "config", endpoint=None)
    cli.environ = {"APPLIANCE_API_PORT": str(real_api.port), "APPLIANCE_PASSWORD": ADMIN_PASSWORD}
    results = {}
    for argv in commands:
        result = cli(*argv)
        assert result.code == 0, (argv, result.stderr)
        results[" ".join(argv[:2])] = result

    assert "logged in to http://127.0.0.1:" in results["login"].stdout
    password = results["secret passwords"]
    assert "(hidden)" in password.stdout and "ACTIVE" in password.stdout
    # the installed element with a line per resource, not one cut JSON blob
    assert re.search(r"ACTIVE\s+dns\.domains\.\$zone\.records\.\$www\s", results["em install"].stdout)
    records = results["dns records"].stdout.splitlines()
    assert records[0].split() == ["UUID", "NAME", "TYPE", "ADDRESS", "CONTENT", "TTL", "DISABLED"]
    assert any(re.search(r"\bwww\s+A\s+10\.0\.0\.10\b", row) for row in records)
    assert any("hello from hello.test" in row for row in records)
    available = results["elements available"].stdout.splitlines()
    header = available[0].split()
    hello = dict(zip(header, next(row for row in available if " hello " in row).split()))
    assert (hello["VERSION"], hello["INSTALLED"]) == ("1.1.0", "1.0.0")
    assert "ACTIVE" in results["em upgrade"].stderr
    assert "Command-line client" in results["--help"].stdout

    after = cli("--json", "dns", "records", "list", "hello.test")
    assert sorted(r["record"]["name"] for r in after.json() if r["type"] == "A") == ["api", "www"]
    element = cli("--json", "em", "show", "hello").json()
    assert (element["version"], element["status"]) == ("1.1.0", "ACTIVE")


@pytest.mark.parametrize("name", ["hello-1.0.0.yaml", "hello-1.1.0.yaml"])
def test_examples_are_manifests_of_one_element(name):
    from appliance.cli.em import read_manifest
    manifest = read_manifest(str(ROOT / "examples" / name))
    assert manifest["name"] == "hello" and name == f"hello-{manifest['version']}.yaml"
