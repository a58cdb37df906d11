"""The driver on a node with systemd: PostgreSQL under the unit it writes. No systemd runs
here, so systemctl is tests/sqldb/fake_systemctl.py (a documented mock that runs the
unit's own ExecStart/ExecStop as its User); the unit file itself is what
test_node_errors.py checks with systemd-analyze."""

import os
import sys

from . import pgnode
from .pgnode import Instance, Node, free_port, psql

base = pgnode.base
ADDRESS = "127.0.0.26"
FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_systemctl.py")


def calls(node):
    try:
        with open(os.path.join(node.root, "systemctl.calls")) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def test_postgresql_runs_under_its_unit(base):
    node = Node(base, ADDRESS)
    node.host.systemctl_command = [sys.executable, FAKE, node.root]
    node.driver.systemd = True               # what a node booted with systemd gets
    inst = Instance([node], free_port(ADDRESS))
    inst.set_password("unit_user", "unit-password-1")
    unit = f"appliance-sqldb-{inst.uuid}.service"
    unit_path = os.path.join(node.root, "etc/systemd/system", unit)
    try:
        result = inst.apply(node)
        assert result["status"] == "ACTIVE", result
        assert os.path.exists(unit_path)
        assert calls(node) == ["daemon-reload", f"enable --now {unit}"]
        assert psql(ADDRESS, inst.port, "unit_user", "unit-password-1",
                    "SELECT current_user") == (0, "unit_user")
        # the same item: no call; a setting that needs a restart: stop and start the unit
        pid = node.postmaster(inst.uuid, inst.port)
        assert inst.apply(node)["status"] == "ACTIVE"
        assert len(calls(node)) == 2 and node.postmaster(inst.uuid, inst.port) == pid
        inst.ram_mb = 512
        assert inst.apply(node)["status"] == "ACTIVE"
        assert calls(node)[2:] == [f"stop {unit}", f"enable --now {unit}"]
        assert node.postmaster(inst.uuid, inst.port) not in (None, pid)
        # a killed server is started again by the tick, through the unit
        node.kill(inst.uuid, inst.port)
        node.tick()
        assert calls(node)[-1] == f"enable --now {unit}"
        assert node.postmaster(inst.uuid, inst.port) is not None
    finally:
        node.remove(inst.item(node))
    assert calls(node)[-2:] == [f"disable --now {unit}", "daemon-reload"]
    assert not os.path.exists(unit_path)
    assert node.postmaster(inst.uuid, inst.port) is None
