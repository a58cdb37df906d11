"""The reference CLI's configs and SSH-key targets (`exordos configs ...`,
`exordos secret ssh_keys add --node`) against a real appliance: what they send works here."""

import os
import subprocess
import uuid

import pytest

from appliance.iam.builtin import ADMIN_PROJECT

from .conftest import PIP_TIMEOUT
from .test_session import named, shown

IMAGE = "https://images.example.test/base.qcow2"
pytestmark = pytest.mark.timeout(PIP_TIMEOUT + 300)


def with_env(exordos, extra, *args):
    """`exordos` with variables of ours in its environment (add-from-env reads them)."""
    env = {"HOME": exordos.home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LANG": "C.UTF-8", "NO_PROXY": "127.0.0.1,localhost", "COLUMNS": "250", **extra}
    return subprocess.run([exordos.program, *args], cwd=exordos.cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def test_add_from_env_list_and_delete_by_node(exordos):
    name = f"refcli-cfg-{uuid.uuid4().hex[:6]}"
    exordos.ok("compute", "nodes", "add", "-p", ADMIN_PROJECT, "-i", IMAGE, "-n", name)
    node = named(exordos.json("compute", "nodes", "list"), name)
    done = with_env(exordos, {"GCT_ENV_PORT": "80", "GCT_CFG_TEXT_motd": "hello",
                              "GCT_CFG_PATH_motd": "/etc/motd"},
                    "configs", "add-from-env", "-p", ADMIN_PROJECT, node["uuid"])
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in exordos.json("configs", "list")}
    assert rows["envs"]["path"] == "/var/lib/exordos/app.env"
    assert rows["motd"]["path"] == "/etc/motd" and rows["motd"]["mode"] == "0644"
    # the status step's: no agent on the node, so at most IN_PROGRESS
    assert rows["motd"]["owner"] == "root" and rows["motd"]["status"] in ("NEW", "IN_PROGRESS")
    detail = shown(exordos.json("configs", "show", rows["envs"]["uuid"]))
    assert "PORT=80" in detail["body"]
    exordos.ok("configs", "delete", "-n", node["uuid"])
    assert not [r for r in exordos.json("configs", "list") if r["name"] in ("envs", "motd")]


def test_ssh_keys_add_to_a_node(exordos):
    name = f"refcli-ssh-{uuid.uuid4().hex[:6]}"
    exordos.ok("compute", "nodes", "add", "-p", ADMIN_PROJECT, "-i", IMAGE, "-n", name)
    node = named(exordos.json("compute", "nodes", "list"), name)
    exordos.ok("secret", "ssh_keys", "add", "--node", node["uuid"], "--user", "ubuntu")
    key = named(exordos.json("secret", "ssh_keys", "list"), f"ssh_key_to_{name}")
    detail = shown(exordos.json("secret", "ssh_keys", "show", key["uuid"]))
    assert detail["user"] == "ubuntu" and node["uuid"] in detail["target"]
    assert detail["authorized_keys"] == ".ssh/authorized_keys"
    # a second add to the same target is a 409 on the name, which exordos skips
    again = exordos.ok("secret", "ssh_keys", "add", "--node", node["uuid"], "--user", "ubuntu")
    assert "already exists, skipping" in again.stdout
