"""Passwords, SSH keys and RSA keys: generation, stability, validation, delivery."""

import re
import string
import uuid

import pytest
from cryptography.hazmat.primitives import serialization

from appliance.iam.builtin import ADMIN_PROJECT
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

from .conftest import remember, wait_for
from .test_secrets import delivered

P = "/v1/secret/passwords"
SSH = "/v1/secret/ssh_keys"
RSA = "/v1/secret/rsa_keys"


@pytest.fixture(autouse=True)
def running(delivery):
    return delivery


def make(admin, path, **fields):
    resp = admin.post(path, {"name": f"g-{uuid.uuid4().hex[:10]}", "project_id": ADMIN_PROJECT,
                             **fields})
    assert resp.status == 201, resp
    body = resp.json
    for key in ("value", "private_key"):
        if body.get(key):
            remember(body[key])
    return body


def test_password_defaults_and_generation(admin):
    pw = make(admin, P)
    assert pw["method"] == "AUTO_HEX" and pw["constructor"] == {"kind": "plain"}
    assert pw["default_length"] == 32
    assert len(pw["value"]) == 32 and set(pw["value"]) <= set(string.hexdigits.lower())
    url = make(admin, P, method="AUTO_URL_SAFE", default_length=48)
    assert len(url["value"]) == 48
    assert re.fullmatch(r"[A-Za-z0-9_-]{48}", url["value"])
    odd = make(admin, P, default_length=9)
    assert len(odd["value"]) == 9
    assert len({make(admin, P)["value"] for _ in range(5)}) == 5


def test_generated_password_is_stable_across_updates_and_restart(admin, server, tmp_path):
    pw = make(admin, P)
    item = f"{P}/{pw['uuid']}"
    assert admin.put(item, {"description": "unrelated"}).json["value"] == pw["value"]
    # a new API process over the same state (a restart) reads the same value
    again = ApiServer(server.settings["state_dir"], ADMIN_PASSWORD).start()
    try:
        other = again.client(again.login("admin", ADMIN_PASSWORD))
        assert other.get(item).json["value"] == pw["value"]
    finally:
        again.stop()
    # what it was generated from changed: a new value
    changed = admin.put(item, {"default_length": 40}).json
    assert len(changed["value"]) == 40 and changed["value"] != pw["value"]
    remember(changed["value"])
    regenerated = admin.post(f"{item}/actions/regenerate/invoke", {}).json
    assert regenerated["value"] != changed["value"] and regenerated["status"] == "NEW"
    remember(regenerated["value"])


def test_manual_password(admin):
    value = remember(f"manual-{uuid.uuid4().hex}")
    pw = make(admin, P, method="MANUAL", value=value)
    assert pw["value"] == value
    resp = admin.post(P, {"name": "manual-without", "project_id": ADMIN_PROJECT,
                          "method": "MANUAL"})
    assert resp.status == 400 and "MANUAL" in resp.json["message"]
    resp = admin.post(P, {"name": "auto-with", "project_id": ADMIN_PROJECT,
                          "value": "chosen-by-me"})
    assert resp.status == 400 and "MANUAL" in resp.json["message"]
    assert admin.post(f"{P}/{pw['uuid']}/actions/regenerate/invoke", {}).status == 400


@pytest.mark.parametrize("length,ok", [(7, False), (8, True), (4096, True), (4097, False),
                                       ("12", False)])
def test_default_length_range(admin, length, ok):
    resp = admin.post(P, {"name": f"len-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT,
                          "default_length": length})
    assert (resp.status == 201) is ok, resp
    if ok:
        remember(resp.json["value"])
    else:
        assert "default_length" in resp.json["message"]


def test_passwords_are_delivered(server, admin):
    pw = make(admin, P)
    wait_for(lambda: admin.get(f"{P}/{pw['uuid']}").json["status"] == "ACTIVE")
    assert delivered(server, pw["uuid"], "passwords") == pw["value"]


def test_ssh_keys(server, admin):
    key = make(admin, SSH, comment="ops@appliance")
    assert key["algorithm"] == "ed25519"
    assert key["public_key"].startswith("ssh-ed25519 ") and key["public_key"].endswith(
        " ops@appliance")
    assert key["fingerprint"].startswith("SHA256:")
    private = serialization.load_ssh_private_key(key["private_key"].encode(), None)
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH).decode()
    assert key["public_key"].startswith(public)
    rsa_key = make(admin, SSH, algorithm="rsa", bits=2048)
    assert rsa_key["public_key"].startswith("ssh-rsa ")
    assert serialization.load_ssh_private_key(rsa_key["private_key"].encode(),
                                              None).key_size == 2048
    wait_for(lambda: admin.get(f"{SSH}/{key['uuid']}").json["status"] == "ACTIVE")
    assert delivered(server, key["uuid"], "ssh_keys") == key["private_key"]
    bad = admin.post(SSH, {"name": "bad-bits", "project_id": ADMIN_PROJECT,
                           "algorithm": "ed25519", "bits": 2048})
    assert bad.status == 400
    # the private part is read-only
    assert admin.put(f"{SSH}/{key['uuid']}", {"private_key": "mine"}).status == 403


@pytest.mark.parametrize("bitness", [2048, 3072, 4096])
def test_rsa_key_sizes(admin, bitness):
    key = make(admin, RSA, bitness=bitness)
    private = serialization.load_pem_private_key(key["private_key"].encode(), None)
    assert private.key_size == key["bitness"] == bitness
    assert key["public_key"].startswith("-----BEGIN PUBLIC KEY-----")
    assert "bits" not in key


def test_rsa_bitness_defaults_to_2048_as_the_reference_cli_expects(admin):
    # the reference CLI's `rsa_keys add` sends no size at all
    key = make(admin, RSA)
    assert key["bitness"] == 2048
    assert serialization.load_pem_private_key(key["private_key"].encode(),
                                              None).key_size == 2048
    assert admin.put(f"{RSA}/{key['uuid']}", {"bitness": 4096}).status == 403
    assert admin.get(f"{RSA}/{key['uuid']}").json["bitness"] == 2048


def test_rsa_bits_is_a_deprecated_alias_of_bitness(admin):
    key = make(admin, RSA, bits=3072)
    assert key["bitness"] == 3072 and "bits" not in key
    assert serialization.load_pem_private_key(key["private_key"].encode(),
                                              None).key_size == 3072
    assert make(admin, RSA, bits=4096, bitness=4096)["bitness"] == 4096
    names = {k["name"] for k in admin.get(RSA).json}
    clash = admin.post(RSA, {"name": "clash", "project_id": ADMIN_PROJECT,
                             "bits": 2048, "bitness": 4096})
    assert clash.status == 400 and "bitness" in clash.json["message"]
    assert {k["name"] for k in admin.get(RSA).json} == names


@pytest.mark.parametrize("field", ["bitness", "bits"])
@pytest.mark.parametrize("size", [1024, 2047, 2500, 8192, "2048"])
def test_rsa_bad_sizes(admin, field, size):
    resp = admin.post(RSA, {"name": "bad", "project_id": ADMIN_PROJECT, field: size})
    assert resp.status == 400 and field in resp.json["message"], resp
    assert admin.get(RSA, query={"name": "bad"}).json == []


def test_private_parts_are_encrypted_at_rest(server, admin):
    make(admin, RSA)
    make(admin, SSH)
    for kind in ("secret_rsa_keys", "secret_ssh_keys", "secret_passwords"):
        for path in server.store.files_of(kind):            # the base and its journal
            with open(path) as f:
                content = f.read()
            assert "PRIVATE KEY" not in content
    pw = make(admin, P)
    for path in server.store.files_of("secret_passwords"):
        with open(path) as f:
            assert pw["value"] not in f.read()
