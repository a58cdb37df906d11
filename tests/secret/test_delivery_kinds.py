"""appliance/secret/kinds.py is the delivery daemon's light copy of what the resources
declare (folder = the last segment of the path, sealed fields): the two must agree, and
the daemon's module must not load the API framework (its reason to exist)."""

import subprocess
import sys

from appliance.secret import kinds, resources
from tests.conftest import ROOT


def test_the_delivery_table_matches_the_resources():
    declared = {kind: (r.path.rsplit("/", 1)[1], tuple(r.sealed))
                for kind, r in resources.KINDS.items()}
    assert kinds.KINDS == declared


def test_the_delivery_daemon_loads_no_api_framework():
    probe = ("import sys, daemons.delivery; "
             "print(sorted(m for m in ('bottle', 'jsonschema', 'appliance.api.resource', "
             "'appliance.secret.resources') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60, cwd=ROOT).stdout
    assert out.strip() == "[]"
