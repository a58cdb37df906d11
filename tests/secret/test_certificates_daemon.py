"""The certificate daemon stays small: neither the ACME client (the order's own process
loads it) nor the API framework is loaded by it (docs/certificates.md, "Memory")."""

import subprocess
import sys

from tests.conftest import ROOT

HEAVY = ("acme", "josepy", "requests", "OpenSSL", "bottle", "jsonschema",
         "appliance.api.resource", "appliance.secret.resources")

# a pass of the daemon's reconcile step over a store holding a certificate that needs no
# order (manual): it is made ACTIVE, and what got loaded is printed
PROBE = """
import logging, sys
from appliance import config
from daemons.certificates import CertificateWork
from state import Store

store = Store(sys.argv[1])
store.collection("secret_certificates").insert({
    "method": {"kind": "manual"}, "domains": ["a.test"], "status": "NEW",
    "status_reason": None, "cert": None})
settings = config.load(environ={"APPLIANCE_STATE_DIR": sys.argv[1]})
CertificateWork(store, settings, logging.getLogger("probe")).reconcile()
print(store.collection("secret_certificates").records()[0]["status"])
print(sorted(m for m in sys.argv[2:] if m in sys.modules))
"""


def test_the_daemon_loads_neither_acme_nor_the_api_framework(tmp_path):
    out = subprocess.run([sys.executable, "-P", "-c", PROBE, str(tmp_path), *HEAVY],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["ACTIVE", "[]"]
