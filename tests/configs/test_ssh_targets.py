"""SSH-key targets: the reference's fields on /v1/secret/ssh_keys, the producer, and the
driver's managed block in the user's authorized_keys (tmp root prefix)."""

import os
import stat
import uuid

import pytest

from appliance.agent.targets import View
from appliance.secret.node import BEGIN, END, Driver
from appliance.secret.ssh_targets import for_node
from tests.compute.conftest import Member, created, refused
from tests.iam.helpers import ADMIN_PROJECT

from .fakehost import FakeHost, write_passwd
from .helpers import hw_node

K = "/v1/secret/ssh_keys"
THEIRS = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f alice@laptop"


def key_body(**fields):
    return {"name": f"k-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT, **fields}


@pytest.fixture(scope="module")
def node(admin):
    return hw_node(admin)


def test_target_fields_defaults_and_producer(server, admin, node):
    target = {"kind": "node", "node": node["uuid"]}
    key = created(admin.post(K, key_body(target=target, user="app")))
    assert key["authorized_keys"] == ".ssh/authorized_keys" and key["target_public_key"] is None
    untargeted = created(admin.post(K, key_body()))
    assert untargeted["target"] is None
    theirs = created(admin.post(K, key_body(target=target, user="app",
                                            target_public_key=THEIRS)))
    items = {i["master"]: i for i in for_node(View(server.store), node)}
    assert untargeted["uuid"] not in items
    assert items[key["uuid"]]["value"] == {"user": "app", "key": key["public_key"],
                                          "authorized_keys": ".ssh/authorized_keys"}
    assert items[theirs["uuid"]]["value"]["key"] == THEIRS
    assert items[key["uuid"]]["kind"] == "ssh_key"
    assert items[key["uuid"]]["master_kind"] == "secret_ssh_keys"
    resp = admin.put(f"{K}/{key['uuid']}", {"user": "deploy"})
    assert resp.status == 200 and resp.json["status"] == "NEW"
    assert {i["master"]: i for i in for_node(View(server.store), node)}[
        key["uuid"]]["value"]["user"] == "deploy"


BAD = [
    ({"target": {"kind": "node", "node": "PLACEHOLDER"}}, "user: required with a target"),
    ({"target": {"kind": "node", "node": str(uuid.uuid4())}, "user": "app"}, "not found"),
    ({"user": "a b"}, "user"),
    ({"authorized_keys": "../../etc/shadow"}, "authorized_keys"),
    ({"target_public_key": 'command="rm -rf /" ' + THEIRS}, "no options"),
    ({"target_public_key": THEIRS + "\nssh-ed25519 AAAAx"}, "no options"),
    ({"target": {"kind": "rack"}, "user": "app"}, "target"),
]


@pytest.mark.parametrize("change,needle", BAD, ids=[b[1] for b in BAD])
def test_bad_targets_are_400(admin, node, change, needle):
    if change.get("target", {}).get("node") == "PLACEHOLDER":
        change = {"target": {"kind": "node", "node": node["uuid"]}}
    before = len(admin.get(K).json)
    assert needle in refused(admin.post(K, key_body(**change)), 400)
    assert len(admin.get(K).json) == before


def test_a_key_cannot_target_another_projects_node(server, admin, node):
    member = Member(server, admin)
    body = key_body(project_id=member.project, user="app",
                    target={"kind": "node", "node": node["uuid"]})
    assert "not found" in refused(member.client.post(K, body), 400)


# ---- the driver --------------------------------------------------------------------------

@pytest.fixture
def host(tmp_path):
    root = tmp_path / "node"
    write_passwd(str(root))
    return FakeHost(root)


def ssh_item(master, key, user="app", authorized_keys=".ssh/authorized_keys"):
    return {"uuid": f"t-{master}", "kind": "ssh_key", "master": master,
            "value": {"user": user, "authorized_keys": authorized_keys, "key": key}}


def test_managed_block_in_the_users_authorized_keys(host):
    driver = Driver(host)
    path = host.path("/home/app/.ssh/authorized_keys")
    a, b = ssh_item("a", "ssh-ed25519 AAAAone a@x"), ssh_item("b", THEIRS)
    assert driver.apply(a, None)["status"] == "ACTIVE"
    for p, mode in ((path, 0o600), (os.path.dirname(path), 0o700),
                    (host.path("/home/app"), 0o700)):
        st = os.stat(p)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 1234, mode)
    # /home itself is not the user's
    assert os.stat(host.path("/home")).st_uid == 0
    # a line of the user's own survives every edit
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write("ssh-rsa AAAAmine me@home\n" + text)
    driver.apply(b, None)
    driver.apply(ssh_item("a", "ssh-ed25519 AAAAtwo a@x"), a)
    lines = open(path).read().splitlines()
    assert lines[0] == "ssh-rsa AAAAmine me@home"
    assert lines[1] == BEGIN and lines[-1] == END
    assert sorted(lines[2:-1]) == sorted(["ssh-ed25519 AAAAtwo a@x appliance:a",
                                          THEIRS + " appliance:b"])
    driver.remove(b)
    driver.remove(ssh_item("a", "ssh-ed25519 AAAAtwo a@x"))
    assert open(path).read() == "ssh-rsa AAAAmine me@home\n"


def test_a_key_moved_to_another_user_leaves_the_first(host):
    driver = Driver(host)
    a = ssh_item("a", THEIRS)
    driver.apply(a, None)
    moved = ssh_item("a", THEIRS, user="root")
    assert driver.apply(moved, a)["status"] == "ACTIVE"
    assert open(host.path("/home/app/.ssh/authorized_keys")).read() == ""
    assert "appliance:a" in open(host.path("/root/.ssh/authorized_keys")).read()


def test_errors_say_why(host, tmp_path):
    driver = Driver(host)
    assert "no such user" in driver.apply(ssh_item("a", THEIRS, user="ghost"), None)["reason"]
    outside = driver.apply(ssh_item("a", THEIRS, authorized_keys="/tmp/keys"), None)
    assert "outside the allowed roots" in outside["reason"]
    os.makedirs(host.path("/home/app"))
    os.symlink(str(tmp_path), host.path("/home/app/.ssh"))
    assert "outside the allowed roots" in driver.apply(ssh_item("a", THEIRS), None)["reason"]
