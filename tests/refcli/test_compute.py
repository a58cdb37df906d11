"""The reference CLI's compute commands (`exordos compute nodes ...`) against a real
appliance: what its add, list, update, info, power and delete send must work here. The
appliance has no hypervisor, so its compute daemon turns the node ERROR (nowhere to place
it) at a moment of its own: the node is NEW or ERROR whenever it is read."""

import json
import urllib.request

import pytest

from appliance.iam.builtin import ADMIN_PROJECT

from .conftest import PIP_TIMEOUT
from .test_session import cached_tokens, named, shown

IMAGE = "https://images.example.test/base.qcow2"
pytestmark = pytest.mark.timeout(PIP_TIMEOUT + 300)


def test_nodes_add_list_update_info_power_and_delete(exordos):
    exordos.ok("compute", "nodes", "add", "-p", ADMIN_PROJECT, "-i", IMAGE, "-n", "refcli-node",
               "-c", "2", "-r", "2048", "-d", "15", "--hostname", "refcli-node")
    node = named(exordos.json("compute", "nodes", "list"), "refcli-node")
    # the list's columns: IP is "unknown" until the node has its port
    # (its json output gives every cell as text)
    assert (node["cores"], node["ram"], node["disks"]) == ("2", "2048", "15")
    assert node["status"] in ("NEW", "ERROR")
    assert node["image"] == IMAGE and node["ip"] == "unknown"

    exordos.ok("compute", "nodes", "update", "-u", node["uuid"], "-c", "3", "-d", "20",
               "-i", IMAGE + "?v=2")
    detail = shown(exordos.json("compute", "nodes", "info", node["uuid"]))
    assert detail["cores"] == "3" and detail["status"] in ("IN_PROGRESS", "ERROR")
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
    # IN_PROGRESS until the compute daemon has tried the URI, which names no test driver
    # file: then ERROR
    assert hv["status"] in ("IN_PROGRESS", "ERROR")
    # HW machines: our 400 (the reference answers 500)
    hw = exordos("compute", "hypervisors", "add", "-n", "hw", "-m", "HW", "--driver-spec",
                 "kind=libvirt", "--driver-spec", "connection_uri=test:///hw")
    assert hw.returncode != 0 and "machine_type" in hw.stderr + hw.stdout
    exordos.ok("compute", "hypervisors", "delete", "-y", hv["uuid"])


def api_call(appliance, exordos, path, body, method="POST"):
    """A call the reference CLI makes only inside host setup (sudo), or never: made with
    the token the CLI cached for itself."""
    token = cached_tokens(exordos)["access_token"]
    request = urllib.request.Request(
        f"{appliance.url}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def test_hypervisors_add_as_init_add_sends_it(exordos, appliance):
    """`hypervisors init --add` sets the host up with sudo, then runs `hypervisors add`
    with the measured capacity and this local_hyper spec (its storage_pool a plain name),
    then registers its agent and calls issue_key: the same add, then the same two calls."""
    exordos.ok("compute", "hypervisors", "list")        # logs in: the token is cached
    status, node = api_call(appliance, exordos, "/v1/compute/nodes", {
        "name": "refcli-hw", "project_id": ADMIN_PROJECT, "cores": 1, "ram": 1024,
        "node_type": "HW"})
    assert status == 201
    spec = ["kind=exordos_local_hyper", f"node={node['uuid']}",
            "network=exordos-core-net", "iface_mtu=1500", "network_type=network",
            "storage_pool=default", "connection_uri=test:///refcli-local",
            "iface_rom_file=/var/lib/exordos/rom/efi-virtio.rom", "machine_prefix=vm-"]
    args = [a for kv in spec for a in ("--driver-spec", kv)]
    exordos.ok("compute", "hypervisors", "add", "-n", "refcli-local", "--avail-cores", "8",
               "--avail-ram", "15876", *args)
    hv = named(exordos.json("compute", "hypervisors", "list"), "refcli-local")
    detail = shown(exordos.json("compute", "hypervisors", "show", hv["uuid"]))
    assert "exordos_local_hyper" in detail["driver_spec"] and node["uuid"] in \
        detail["driver_spec"]
    # a second hypervisor on that node: our 409, which exordos reports
    again = exordos("compute", "hypervisors", "add", "-n", "refcli-local-2", *[
        a for kv in spec[:-3] + ["connection_uri=test:///refcli-local-2"] + spec[-2:]
        for a in ("--driver-spec", kv)])
    # (exordos prints its own "Already exists" for a 409)
    assert again.returncode != 0 and "Already exists" in again.stderr + again.stdout
    # base_client.register_agent_and_write_key: the agent (node uuid as its uuid), issue_key
    status, agent = api_call(appliance, exordos, "/v1/ua/agents/", {
        "uuid": node["uuid"], "name": f"universal_agent_{node['uuid'][:8]}",
        "node": node["uuid"], "capabilities": {"capabilities": [
            "pool", "pool_volume", "pool_machine", "local_pool"]}, "facts": {"facts": []}})
    assert status == 201 and agent["uuid"] == node["uuid"]
    status, issued = api_call(appliance, exordos,
                              f"/v1/ua/agents/{node['uuid']}/actions/issue_key/invoke", {})
    assert status == 200 and list(issued) == ["key"] and len(issued["key"]) == 44
    exordos.ok("compute", "hypervisors", "delete", "-y", hv["uuid"])
    # the CLI's `nodes list` cannot show a HW node (no disk_spec): leave none behind
    assert api_call(appliance, exordos, f"/v1/compute/nodes/{node['uuid']}", None,
                    method="DELETE")[0] == 204
