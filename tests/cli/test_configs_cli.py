"""`appliance config ...` against the real API."""

from __future__ import annotations

import base64
import uuid

from .conftest import ADMIN_PROJECT

CONFIGS = "/v1/config/configs/"


def hw_node(cli, name):
    result = cli("--json", "create", "compute/nodes", f"name={name}", f"project_id={ADMIN_PROJECT}",
                 "node_type=HW", "cores:=1", "ram:=1024")
    assert result.code == 0, result.stderr
    return result.json()


def add(cli, *argv):
    result = cli("--json", "config", "add", "-p", ADMIN_PROJECT, *argv)
    assert result.code == 0, result.stderr
    return result.json()


def test_add_show_update_list_delete(logged_in, tmp_path):
    node = hw_node(logged_in, f"web-{uuid.uuid4().hex[:6]}")
    source = tmp_path / "app.conf"
    source.write_text("a=1\n")
    config = add(logged_in, "-n", "app", "--node", node["name"], "--path", "/etc/app.conf",
                 "--content", f"@{source}", "--mode", "0640", "--owner", "app",
                 "--on-change", "systemctl reload app")
    sent = logged_in.transport.to(CONFIGS)[-1]
    assert sent.method == "POST" and sent.body == {
        "name": "app", "project_id": ADMIN_PROJECT, "path": "/etc/app.conf", "mode": "0640",
        "owner": "app", "target": {"kind": "node", "node": node["uuid"]},
        "on_change": {"kind": "shell", "command": "systemctl reload app"},
        "body": {"kind": "text", "content": "a=1\n"}}
    assert config["status"] == "NEW"
    assert logged_in("--json", "config", "show", "app").json()["uuid"] == config["uuid"]
    listed = logged_in("config", "list")
    assert listed.code == 0 and config["uuid"] in listed.stdout
    updated = logged_in("--json", "config", "update", "app", "--template", "port={{ port }}",
                        "--var", "port:=8080", "--no-on-change")
    assert updated.code == 0, updated.stderr
    assert updated.json()["body"] == {"kind": "template", "template": "port={{ port }}",
                                      "variables": {"port": 8080}}
    # --var alone merges into the template it has
    link = f"$core.secret.passwords.${uuid.uuid4()}:value"
    again = logged_in("--json", "config", "update", "app", "--var", f"pw={link}")
    assert again.json()["body"]["variables"] == {"port": 8080, "pw": link}
    assert logged_in("config", "delete", "app").code == 0
    assert logged_in("config", "show", config["uuid"]).code == 1


def test_refusals_are_clear(logged_in):
    node = hw_node(logged_in, f"n-{uuid.uuid4().hex[:6]}")
    bad = logged_in("config", "add", "-p", ADMIN_PROJECT, "--node", node["uuid"],
                    "--path", "relative/x", "--content", "x")
    assert bad.code == 1 and "path" in bad.stderr
    bad = logged_in("config", "add", "-p", ADMIN_PROJECT, "--node", node["uuid"],
                    "--path", "/etc/x", "--template", "{{ a }}")
    assert bad.code == 1 and "names no variable" in bad.stderr
    usage = logged_in("config", "add", "--node", "x", "--content", "a", "--template", "b")
    assert usage.code == 2
    assert logged_in("config", "update", "nothing-here", "--mode", "0600").code == 1
    assert logged_in("config", "delete").code == 2
    assert logged_in("config", "list").code == 0


def test_add_from_env_and_delete_by_node(logged_in):
    node = hw_node(logged_in, f"env-{uuid.uuid4().hex[:6]}")
    fixed = str(uuid.uuid4())
    environ = {"GCT_ENV_PORT": "80", "GCT_ENV_HOST": "a.example",
               "GCT_CFG_TEXT_motd": base64.b64encode(b"hello\n").decode(),
               "GCT_CFG_PATH_motd": "/etc/motd", "UNRELATED": "x"}
    result = logged_in("config", "add-from-env", "-p", ADMIN_PROJECT, node["uuid"],
                       "--base64", "-u", fixed, environ=environ)
    assert result.code == 0, result.stderr
    envs = logged_in("--json", "config", "show", fixed).json()
    assert envs["name"] == "envs" and envs["path"] == "/var/lib/exordos/app.env"
    assert envs["body"] == {"kind": "text", "content": "HOST=a.example\nPORT=80\n"}
    assert envs["target"] == {"kind": "node", "node": node["uuid"]}
    motd = logged_in("--json", "config", "show", "motd").json()
    assert motd["body"]["content"] == "hello\n"
    half = logged_in("config", "add-from-env", "-p", ADMIN_PROJECT, node["uuid"],
                     environ={"GCT_CFG_TEXT_x": "a"})
    assert half.code == 2 and "GCT_CFG_PATH_x" in half.stderr
    none = logged_in("config", "add-from-env", "-p", ADMIN_PROJECT, node["uuid"])
    assert none.code == 1
    gone = logged_in("config", "delete", "--node", node["name"])
    assert gone.code == 0 and gone.stdout.count("deleted") == 2
    assert all(c["target"].get("node") != node["uuid"]
               for c in logged_in("--json", "config", "list").json())
