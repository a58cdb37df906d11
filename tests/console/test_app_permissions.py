"""The console's allows() (static/js/openapi.js) gives the API's answer for every case.

The console offers a button only when allows(session permissions, x-permission) is true;
the API decides with appliance/iam/permissions.py (Principal.allows, grants). The two must
agree, or the console would offer what the API refuses (or hide what it allows). The
JavaScript runs in node (Debian's, the one `make console-vendor` uses), on the same table
of cases as the Python.
"""

import itertools
import json
import pathlib
import shutil
import subprocess

import pytest

from appliance.iam.permissions import Principal

MODULE = (pathlib.Path(__file__).resolve().parents[2]
          / "appliance" / "console" / "static" / "js" / "openapi.js")

GRANTED = [[], ["*.*.*"], ["repo.*.read"], ["repo.element.read"], ["*.element.*"],
           ["iam.project.read", "iam.user.*"], ["repo.ele*.read"], ["repo.element"],
           ["*.*"], ["compute.node.power_on"]]
REQUIRED = ["repo.element.read", "repo.element.install", "repo.repository.read",
            "iam.project.read", "iam.user.delete", "compute.node.power_on",
            "repo.element.read | repo.repository.upload", "iam.project.create | iam.user.read",
            "public", "authenticated", "em.element.read"]


def api_allows(granted, x_permission):
    if x_permission == "public":
        return True
    principal = Principal({"uuid": "u"}, None, granted)
    return any(principal.allows(p) for p in x_permission.split(" | "))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_allows_matches_the_api_rule_case_by_case():
    cases = list(itertools.product(GRANTED, REQUIRED))
    script = (f"import {{ allows }} from {json.dumps(MODULE.as_uri())};\n"
              f"const cases = {json.dumps(cases)};\n"
              "console.log(JSON.stringify(cases.map(([g, r]) => allows(g, r))));\n")
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    console = json.loads(out)
    expected = [api_allows(g, r) for g, r in cases]
    differ = [(g, r, c, e) for (g, r), c, e in zip(cases, console, expected) if c != e]
    assert differ == []
    assert any(expected) and not all(expected)   # the table has both answers
