"""The reference CLI's compute commands (`exordos compute nodes ...`) against a real
appliance: what its add, list, update, info, power and delete send must work here. The
node stays NEW: this appliance's compute daemon has no hypervisor to place it on."""

import pytest

from appliance.iam.builtin import ADMIN_PROJECT

from .conftest import PIP_TIMEOUT
from .test_session import named, shown

IMAGE = "https://images.example.test/base.qcow2"
pytestmark = pytest.mark.timeout(PIP_TIMEOUT + 300)


def test_nodes_add_list_update_info_power_and_delete(exordos):
    exordos.ok("compute", "nodes", "add", "-p", ADMIN_PROJECT, "-i", IMAGE, "-n", "refcli-node",
               "-c", "2", "-r", "2048", "-d", "15", "--hostname", "refcli-node")
    node = named(exordos.json("compute", "nodes", "list"), "refcli-node")
    # the list's columns: IP is "unknown" until the node has its port
    # (its json output gives every cell as text)
    assert (node["cores"], node["ram"], node["disks"], node["status"]) == (
        "2", "2048", "15", "NEW")
    assert node["image"] == IMAGE and node["ip"] == "unknown"

    exordos.ok("compute", "nodes", "update", "-u", node["uuid"], "-c", "3", "-d", "20",
               "-i", IMAGE + "?v=2")
    detail = shown(exordos.json("compute", "nodes", "info", node["uuid"]))
    assert detail["cores"] == "3" and detail["status"] == "IN_PROGRESS"
    assert "'size': 20" in detail["disk_spec"] and "?v=2" in detail["disk_spec"]
    # a shrink is our 400, which exordos reports
    shrink = exordos("compute", "nodes", "update", "-u", node["uuid"], "-d", "5")
    assert shrink.returncode != 0 and "cannot shrink" in shrink.stderr + shrink.stdout

    for power in ("power-off", "power-on", "reboot"):
        exordos.ok("compute", "nodes", power, node["uuid"])
    exordos.ok("compute", "nodes", "delete", "-y", node["uuid"])
    assert not [n for n in exordos.json("compute", "nodes", "list")
                if n["name"] == "refcli-node"]


def test_sets_and_hypervisors(exordos):
    exordos.ok("compute", "sets", "add", "-p", ADMIN_PROJECT, "-i", IMAGE, "-n", "refcli-set",
               "--replicas", "2")
    made = named(exordos.json("compute", "sets", "list"), "refcli-set")
    exordos.ok("compute", "sets", "update", "-u", made["uuid"], "-c", "2")
    detail = shown(exordos.json("compute", "sets", "show", made["uuid"]))
    assert detail["replicas"] == "2" and detail["cores"] == "2"
    exordos.ok("compute", "sets", "delete", "-y", made["uuid"])

    exordos.ok("compute", "hypervisors", "add", "-n", "refcli-hv", "--driver-spec",
               "kind=libvirt", "--driver-spec", "connection_uri=test:///refcli")
    hv = named(exordos.json("compute", "hypervisors", "list"), "refcli-hv")
    assert hv["status"] == "IN_PROGRESS"
    # HW machines: our 400 (the reference answers 500)
    hw = exordos("compute", "hypervisors", "add", "-n", "hw", "-m", "HW", "--driver-spec",
                 "kind=libvirt", "--driver-spec", "connection_uri=test:///hw")
    assert hw.returncode != 0 and "machine_type" in hw.stderr + hw.stdout
    exordos.ok("compute", "hypervisors", "delete", "-y", hv["uuid"])
