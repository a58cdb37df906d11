"""Remote hypervisors (qemu+ssh) through the API: the pinned host key, and the platform's
SSH key pair, whose public half only platform callers read (appliance/compute/remote.py,
docs/security.md "Hypervisors and their SSH keys"). The connection itself, over a real
sshd in a second network namespace, is tests/compute/test_two_hypervisors.py."""

import os
import stat
import uuid

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from appliance.compute import remote

from .conftest import H, Member, created, refused

HOST_KEY = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
    serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def remote_hv(host_key=HOST_KEY, uri=None, **fields):
    uri = uri or f"qemu+ssh://root@hv-{uuid.uuid4().hex[:8]}.example.test/system"
    spec = {"kind": "libvirt", "connection_uri": uri}
    if host_key is not None:
        spec["host_key"] = host_key
    return {"name": "remote", "driver_spec": spec, **fields}


def test_a_remote_hypervisor_pins_its_host_key(admin):
    hv = created(admin.post(H, remote_hv(HOST_KEY + " root@hv2")))
    # the comment is not part of the key: stored as type and key
    assert hv["driver_spec"]["host_key"] == HOST_KEY
    assert hv["status"] == "IN_PROGRESS"
    # a non-standard port is fine (the known_hosts line names it)
    created(admin.post(H, remote_hv(uri="qemu+ssh://ops@192.0.2.7:2222/system")))


@pytest.mark.parametrize("spec, words", [
    ({"host_key": None}, "host_key: required for a qemu+ssh"),
    ({"host_key": "AAAAC3NzaC1lZDI1NTE5"}, "not an OpenSSH public key line"),
    ({"host_key": HOST_KEY + "\n"}, "not an OpenSSH public key line"),
    ({"host_key": HOST_KEY + "\nssh-ed25519 AAAA"}, "not an OpenSSH public key line"),
    ({"host_key": "10.99.0.2 " + HOST_KEY}, "not an OpenSSH public key line"),
    ({"host_key": "ssh-dss AAAAB3NzaC1kc3M="}, "key type 'ssh-dss'"),
    ({"host_key": "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7"}, "does not decode"),
    ({"host_key": "ssh-rsa " + HOST_KEY.split()[1]}, "does not decode"),
    ({"connection_uri": "qemu+ssh:///system"}, "names the host"),
    ({"connection_uri": "qemu+ssh://root@h.example.test/system?no_verify=1"},
     "no_verify are set by the appliance"),
    ({"connection_uri": "qemu+ssh://root@h.example.test/system?command=/bin/sh"},
     "command are set by the appliance"),
    ({"connection_uri": "qemu+libssh2://root@h.example.test/system"},
     "transport libssh2 is not supported"),
    ({"connection_uri": "test:///default", "host_key": HOST_KEY},
     "host_key: only for a qemu+ssh"),
])
def test_a_remote_spec_without_a_good_pinned_key_is_refused(admin, spec, words):
    before = admin.get(H).json
    body = remote_hv()
    body["driver_spec"].update(spec)
    body["driver_spec"] = {k: v for k, v in body["driver_spec"].items() if v is not None}
    message = refused(admin.post(H, body), 400)
    assert words in message
    if "host_key" in words and "only for" not in words:
        assert "ssh-keyscan" in message            # it says how to get the key
    assert admin.get(H).json == before


def test_an_update_is_held_to_the_same_rule(admin):
    hv = created(admin.post(H, remote_hv()))
    spec = {k: v for k, v in hv["driver_spec"].items() if k != "host_key"}
    assert "ssh-keyscan" in refused(admin.put(f"{H}/{hv['uuid']}", {"driver_spec": spec}), 400)
    assert admin.get(f"{H}/{hv['uuid']}").json["driver_spec"]["host_key"] == HOST_KEY


def test_the_platform_key_is_made_once_and_kept_in_the_state(server, admin):
    first = created(admin.post(H, remote_hv()))["ssh_public_key"]
    again = admin.get(H).json
    assert {h["ssh_public_key"] for h in again} == {first}
    assert first.startswith("ssh-ed25519 ") and first.endswith(" " + remote.KEY_COMMENT)
    path = server.store.private_path(remote.KEY_FILE)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, "rb") as f:
        private = serialization.load_ssh_private_key(f.read(), password=None)
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH).decode()
    assert first == f"{public} {remote.KEY_COMMENT}"
    assert remote.public_key(server.store) == first      # the daemon reads the same one


# ---- the tenant matrix: owner, reader, other owner, admin --------------------------------

ACTORS = ("owner", "reader", "other_owner", "admin")


@pytest.fixture(scope="module")
def actors(server, admin):
    a = Member(server, admin)
    return {"owner": a.client, "reader": Member(server, admin, role="reader").client,
            "other_owner": Member(server, admin).client, "admin": admin}


@pytest.mark.parametrize("actor", ACTORS)
def test_only_the_platform_registers_a_remote_hypervisor_or_reads_the_key(
        server, admin, actors, actor):
    client = actors[actor]
    existing = created(admin.post(H, remote_hv()))
    key = existing["ssh_public_key"]
    before = sorted((h["uuid"], h["updated_at"]) for h in admin.get(H).json)
    body = remote_hv()
    create = client.post(H, body)
    reads = [client.get(H), client.get(f"{H}/{existing['uuid']}"),
             client.get(H, query={"fields": "ssh_public_key"})]
    if actor == "admin":
        assert create.status == 201 and create.json["ssh_public_key"] == key
        assert all(r.status == 200 for r in reads)
        assert reads[1].json["ssh_public_key"] == key
        admin.delete(f"{H}/{create.json['uuid']}")
        return
    # hypervisors are the platform's: a project's caller (whatever its role) neither
    # registers one nor reads the key that opens them, and learns nothing from the answer
    message = refused(create, 403)
    # a reader lacks the permission itself; an owner holds compute.*.* and is told why not
    assert ("permission" if actor == "reader" else "platform") in message
    for resp in reads:
        assert key.split()[1].encode() not in resp.raw
        refused(resp, 403)
    assert sorted((h["uuid"], h["updated_at"]) for h in admin.get(H).json) == before
    assert server.store.collection("compute_hypervisors").by(
        "connection_uri", body["driver_spec"]["connection_uri"]) == []


# ---- what the daemon opens (no libvirt needed) ------------------------------------------

def test_the_daemon_uri_pins_the_key_and_asks_nothing(tmp_path):
    spec = {"connection_uri": "qemu+ssh://root@10.99.0.2:2222/system?socket=/s/libvirt-sock",
            "host_key": HOST_KEY}
    uri = remote.libvirt_uri(spec["connection_uri"], spec, "hv-1", str(tmp_path), "/k/key")
    assert uri.startswith("qemu+ssh://root@10.99.0.2:2222/system?socket=/s/libvirt-sock&")
    assert "keyfile=/k/key" in uri and "no_tty=1" in uri
    wrapper = tmp_path / "hv-1" / "ssh"
    assert f"command={wrapper}" in uri
    with open(tmp_path / "hv-1" / "known_hosts") as f:
        assert f.read() == f"[10.99.0.2]:2222 {HOST_KEY}\n"
    text = wrapper.read_text()
    for option in ("StrictHostKeyChecking=yes", "BatchMode=yes",
                   "GlobalKnownHostsFile=/dev/null", "PasswordAuthentication=no",
                   f"UserKnownHostsFile={tmp_path / 'hv-1' / 'known_hosts'}"):
        assert option in text
    assert stat.S_IMODE(os.stat(wrapper).st_mode) == 0o700
    # a local URI is opened as given
    assert remote.libvirt_uri("qemu:///system", {}, "hv-2", str(tmp_path), "/k") == \
        "qemu:///system"


def test_a_wrong_host_key_is_named_in_the_reason():
    said = ("Cannot recv data: @@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!"
            "     @\nThe fingerprint for the ED25519 key sent by the remote host is\n"
            "SHA256:3XiYFkjSYH9eUZ6WPSUt26ulmB+lNrxxOSpD7RtMcPE.\nHost key verification "
            "failed.: Connection reset by peer")
    why = remote.explain("qemu+ssh://root@10.99.0.2/system", said)
    assert "host key of 10.99.0.2 does not match driver_spec.host_key" in why
    assert "SHA256:3XiYFkjSYH9eUZ6WPSUt26ulmB+lNrxxOSpD7RtMcPE" in why
    assert "ssh-keyscan" in why and "@@@@" not in why
    assert remote.explain("qemu:///system", said) == said
