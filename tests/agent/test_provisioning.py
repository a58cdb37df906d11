"""Credentials that reach nodes without an admin: VM seeds (the compute daemon) and the
appliance's own node (first boot)."""

import json
import os
import stat

from appliance.agent.credentials import API_CA_FILE, vm_credential
from appliance.compute import cloudinit
from tests.agent.conftest import agent_token, enroll, hw_node
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.firstboot.test_firstboot import boot, make_paths

GATEWAY = "10.20.0.1"


def vm_node(server, admin):
    node = hw_node(admin)      # the credential needs only a record with an address
    return server.store.collection("compute_nodes").update(node["uuid"], {
        "default_network": {"ipv4": "10.20.0.30", "gateway": GATEWAY}})


def test_vm_seed_carries_a_stable_working_credential(capserver, capadmin):
    node = vm_node(capserver, capadmin)
    settings = capserver.settings
    first = vm_credential(capserver.store, settings, node)
    assert first["endpoint"] == f"http://{GATEWAY}:{settings['api_port']}"
    assert (first["agent"], first["node"]) == (node["uuid"], node["uuid"]) and "ca" not in first
    # every seed build writes the same credential (else the seed would change each pass)
    assert vm_credential(capserver.store, settings, node) == first
    stored = capserver.store.collection("ua_agents").get(first["agent"])
    assert first["secret"] not in json.dumps(stored)            # hashed and sealed only
    # it is a working credential
    assert capserver.client(agent_token(capserver, first)).get(
        f"/v1/ua/agents/{first['agent']}/payload").status == 200
    files = cloudinit.seed_files(node, {"mac": "52:54:00:00:00:01"}, [], first)
    user = json.loads(files["user-data"].split("\n", 1)[1])
    [written] = [f for f in user["write_files"] if f["path"] == "/etc/appliance/agent.json"]
    assert written["permissions"] == "0600" and json.loads(written["content"]) == first


def test_vm_endpoint_https_setting_and_no_address(capserver, capadmin):
    node = vm_node(capserver, capadmin)
    store, settings = capserver.store, capserver.settings
    try:
        store.write_private(API_CA_FILE, b"-----BEGIN CERTIFICATE-----\nx\n")
        cred = vm_credential(store, settings, node)
        assert cred["endpoint"] == f"https://{GATEWAY}" and cred["ca"].startswith("-----BEGIN")
        cred = vm_credential(store, {**settings, "agent_endpoint": "http://api.example:8080"},
                             node)
        assert cred["endpoint"] == "http://api.example:8080" and "ca" not in cred
    finally:
        os.unlink(store.private_path(API_CA_FILE))
    bare = hw_node(capadmin)
    assert vm_credential(store, settings, bare) is None         # no address yet
    assert store.collection("ua_agents").find_one(node=bare["uuid"]) is None


def test_a_token_enrollment_takes_the_seed_credential_out(capserver, capadmin):
    node = vm_node(capserver, capadmin)
    seeded = vm_credential(capserver.store, capserver.settings, node)
    enrolled = enroll(capserver, capadmin, node["uuid"])
    # the secret the seed held is dead, and no seed carries the new one
    assert capserver.client().post("/v1/iam/clients/default/actions/get_token/invoke", {
        "grant_type": "client_credentials", "client_id": seeded["agent"],
        "client_secret": seeded["secret"]}).status == 401
    assert vm_credential(capserver.store, capserver.settings, node) is None
    assert agent_token(capserver, enrolled)


def test_first_boot_enrolls_the_appliance_node_once(tmp_path):
    paths = make_paths(tmp_path)
    boot(tmp_path, paths)
    path = tmp_path / "root/etc/appliance/agent.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cred = json.loads(path.read_text())
    assert cred["endpoint"].startswith("http://127.0.0.1:")
    boot(tmp_path, paths)                       # a second boot keeps it
    assert json.loads(path.read_text()) == cred
    server = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD).start()
    try:
        node = server.store.collection("compute_nodes").get(cred["node"])
        assert node["node_type"] == "HW" and cred["agent"] == node["uuid"]
        assert server.store.read_private(API_CA_FILE).startswith(b"-----BEGIN CERTIFICATE")
        token = agent_token(server, cred)
        assert server.client(token).get(f"/v1/ua/agents/{cred['agent']}/payload").status == 200
    finally:
        server.stop()
    path.unlink()                               # a lost file: the next boot makes a new one
    boot(tmp_path, paths)
    assert json.loads(path.read_text())["secret"] != cred["secret"]
