"""`python3 -m appliance.service.node`: the driver by hand, as a test in a guest runs it,
here with a fake systemctl program that logs its arguments (systemd cannot run here)."""

import json
import os
import subprocess
import sys
import uuid

from appliance.service import targets
from tests.service.test_unit import service

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE = """#!/bin/sh
echo "$@" >> "{log}"
case "$1" in show) printf 'ActiveState=active\\nSubState=running\\nResult=success\\n'
  printf 'ExecMainStatus=0\\nInvocationID=abc\\n';; esac
"""


def test_apply_and_remove_by_hand(tmp_path):
    log = tmp_path / "calls.log"
    fake = tmp_path / "systemctl"
    fake.write_text(FAKE.format(log=log))
    fake.chmod(0o755)
    node = {"uuid": str(uuid.uuid4())}
    svc = service()
    item = targets.item(node, svc, {svc["uuid"]: "appliance-srv-web.service"})
    path = tmp_path / "item.json"
    path.write_text(json.dumps(item))
    root = tmp_path / "root"

    def run(verb):
        done = subprocess.run([sys.executable, "-m", "appliance.service.node", verb,
                               str(path), "--root", str(root), "--systemctl", str(fake)],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
    actual = run("apply")
    assert actual["status"] == "ACTIVE" and actual["value"]["active_state"] == "active"
    unit = root / "etc/systemd/system" / item["value"]["unit"]
    assert unit.read_text() == item["value"]["text"]
    assert run("remove") == {"removed": item["uuid"]}
    assert not unit.exists()
    calls = log.read_text().splitlines()
    assert calls[:3] == ["daemon-reload", f"enable {unit.name}", f"restart {unit.name}"]
    assert calls[-4:] == [f"stop {unit.name}", f"disable {unit.name}", "daemon-reload",
                          f"reset-failed {unit.name}"]
