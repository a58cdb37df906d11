"""The NoCloud seed (appliance/compute/cloudinit.py): its three files, which SSH keys go
in, and the ISO that cloud-localds builds (read back with isoinfo)."""

import subprocess

import yaml

from appliance.compute import cloudinit

NODE = {"uuid": "7b0a8f52-0a38-4a4e-9ea5-4f3f5c1c2d11", "name": "Web 1!", "hostname": None,
        "project_id": "p1", "node_set": "/v1/compute/sets/s1"}
PORT = {"mac": "52:54:00:aa:bb:cc", "ipv4": "10.32.0.20"}


def key(name, project="p1", target=None, **extra):
    return {"uuid": name, "project_id": project, "public_key": f"ssh-ed25519 AAAA{name}",
            **({"target": target} if target else {}), **extra}


def test_keys_of_the_project_and_those_targeting_the_node_or_its_set():
    keys = [key("plain"), key("elsewhere", project="p2"),
            key("mine", target={"kind": "node", "node": NODE["uuid"]}),
            key("other-node", target={"kind": "node", "node": "someone-else"}),
            key("my-set", target={"kind": "node_set", "node_set": "s1"}),
            key("other-set", target={"kind": "node_set", "node_set": "s2"}),
            key("own", target_public_key="ssh-rsa BBBBown"),
            key("listed", target={"kind": "nodes", "nodes": ["x", NODE["uuid"]]}),
            key("unlisted", target={"kind": "nodes", "nodes": ["x"]}),
            # a targeted key authorizes its target_public_key instead of its own
            key("theirs", target={"kind": "node", "node": NODE["uuid"]},
                target_public_key="ssh-rsa CCCCtheirs")]
    assert cloudinit.keys_for(NODE, keys) == [
        "ssh-ed25519 AAAAlisted", "ssh-ed25519 AAAAmine", "ssh-ed25519 AAAAmy-set",
        "ssh-ed25519 AAAAown", "ssh-ed25519 AAAAplain", "ssh-rsa BBBBown",
        "ssh-rsa CCCCtheirs"]


def test_files_hostname_network_and_ready_marker():
    files = cloudinit.seed_files(NODE, PORT, [key("plain")])
    meta = yaml.safe_load(files["meta-data"])
    assert meta == {"instance-id": NODE["uuid"], "local-hostname": "web-1"}
    assert files["user-data"].startswith("#cloud-config\n")
    user = yaml.safe_load(files["user-data"])
    assert user["hostname"] == "web-1"
    assert user["ssh_authorized_keys"] == ["ssh-ed25519 AAAAplain"]
    assert user["runcmd"] == [["/usr/local/sbin/appliance-ready"]]
    script = user["write_files"][0]["content"]
    assert f'echo "APPLIANCE-NODE-READY {NODE["uuid"]} $ip4" > /dev/ttyS0' in script
    net = yaml.safe_load(files["network-config"])
    assert net == {"version": 2, "ethernets": {"eth0": {
        "match": {"macaddress": PORT["mac"]}, "set-name": "eth0", "dhcp4": True}}}
    assert cloudinit.hostname_of({**NODE, "hostname": "h.example"}) == "h.example"
    assert cloudinit.hostname_of({**NODE, "name": "***"}) == "node-7b0a8f52"


def test_iso_is_built_once_per_content(tmp_path):
    path = str(tmp_path / "seeds" / "n.iso")
    files = cloudinit.seed_files(NODE, PORT, [])
    assert cloudinit.write_seed(path, files) is True
    assert cloudinit.write_seed(path, files) is False
    listing = subprocess.run(["isoinfo", "-d", "-i", path], capture_output=True,
                             text=True, check=True).stdout
    assert "Volume id: cidata" in listing
    user = subprocess.run(["isoinfo", "-R", "-x", "/user-data", "-i", path],
                          capture_output=True, text=True, check=True).stdout
    assert user == files["user-data"]
    assert cloudinit.write_seed(path, cloudinit.seed_files(NODE, PORT, [key("new")])) is True
