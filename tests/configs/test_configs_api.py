"""`/v1/config/configs/` against a real API server: shapes, defaults, checks, status."""

import uuid

import pytest

from tests.compute.conftest import Member, created, refused

from .helpers import C, config_body, hw_node, node_set, password, pw_link


@pytest.fixture(scope="module")
def node(admin):
    return hw_node(admin)


def test_create_fills_the_reference_defaults(admin, node):
    config = created(admin.post(C, config_body(node["uuid"])))
    assert config["mode"] == "0644" and config["owner"] == "root" and config["group"] == "root"
    assert config["on_change"] == {"kind": "no_action"}
    assert config["status"] == "NEW" and config["node_status"] == {}
    assert admin.get(f"{C}/{config['uuid']}").json == config
    assert config["uuid"] in [c["uuid"] for c in admin.get(C).json]


def test_template_with_a_link_is_stored_as_written(admin, node):
    pw = password(admin)
    body = {"kind": "template", "template": "password={{ pw }}\nport={{port}}\n",
            "variables": {"pw": pw_link(pw["uuid"]), "port": 5432}}
    config = created(admin.post(C, config_body(node["uuid"], body=body, mode="0600",
                                               on_change={"kind": "shell",
                                                          "command": "true"})))
    assert config["body"] == body and config["mode"] == "0600"


def test_a_link_to_a_missing_record_is_accepted(admin, node):
    body = {"kind": "template", "template": "{{ a }}",
            "variables": {"a": pw_link(str(uuid.uuid4()))}}
    created(admin.post(C, config_body(node["uuid"], body=body)))


BAD = [
    ({"mode": "644"}, "mode"),
    ({"mode": "0800"}, "mode"),
    ({"path": "etc/app.conf"}, "path"),
    ({"path": "/etc/../root/x"}, "path"),
    ({"path": "/etc/app/"}, "path"),
    ({"path": "/etc//app"}, "path"),
    ({"owner": "a b"}, "owner"),
    ({"on_change": {"kind": "shell"}}, "command"),
    ({"on_change": {"kind": "reboot"}}, "on_change"),
    ({"body": {"kind": "binary", "content": "x"}}, "body"),
    ({"body": {"kind": "text"}}, "content"),
    ({"body": {"kind": "text", "content": "x", "template": "y"}}, "body"),
    ({"body": {"kind": "template", "template": "{{ x }}"}}, "{{ x }} names no variable"),
    ({"body": {"kind": "template", "template": "{{ x.y }}", "variables": {"x": 1}}},
     "is not {{ name }}"),
    ({"body": {"kind": "template", "template": "{{ x }}", "variables": {"x": {"a": 1}}}},
     "variables"),
    ({"body": {"kind": "template", "template": "{{ x }}", "variables": {"x": "$nope"}}},
     "variables.x"),
    ({"body": {"kind": "template", "template": "{{ x }}",
               "variables": {"x": "$core.secret.passwords.$db:value"}}}, "by its uuid"),
    ({"body": {"kind": "template", "template": "{{ x }}",
               "variables": {"x": f"$core.iam.users.${uuid.uuid4()}:name"}}},
     "not a collection a config can link to"),
    ({"body": {"kind": "template", "template": "{{ x }}",
               "variables": {"x": f"$core.compute.nodes.${uuid.uuid4()}:agent_key"}}},
     "agent_key is not a field"),
    ({"body": {"kind": "template", "template": "{{ x }}",
               "variables": {"x": f"$core.secret.secrets.${uuid.uuid4()}:default_value"}}},
     "default_value is not a field"),
    ({"target": {"kind": "node", "node": str(uuid.uuid4())}}, "not found"),
    ({"target": {"kind": "node_set", "node_set": str(uuid.uuid4())}}, "not found"),
    ({"target": {"kind": "rack", "rack": "r1"}}, "target"),
    ({"status": "ACTIVE"}, "status"),
    ({"node_status": {}}, "node_status"),
    ({"colour": "red"}, "colour"),
]


@pytest.mark.parametrize("change,needle", BAD, ids=[b[1] for b in BAD])
def test_bad_input_is_a_clear_4xx_and_creates_nothing(admin, node, change, needle):
    before = len(admin.get(C).json)
    resp = admin.post(C, {**config_body(node["uuid"]), **change})
    status = 403 if set(change) & {"status", "node_status"} else 400
    assert needle in refused(resp, status)
    assert len(admin.get(C).json) == before


def test_a_link_into_another_project_is_refused(server, admin, node):
    stranger = Member(server, admin)
    theirs = password(stranger.client, stranger.project)
    body = {"kind": "template", "template": "{{ x }}", "variables": {"x": pw_link(theirs["uuid"])}}
    assert "another project" in refused(admin.post(C, config_body(node["uuid"], body=body)), 400)


def test_a_member_cannot_target_a_node_of_another_project(server, admin, node):
    member = Member(server, admin)
    body = config_body(node["uuid"], project=member.project)
    assert "not found" in refused(member.client.post(C, body), 400)
    mine = hw_node(member.client, member.project)
    created(member.client.post(C, config_body(mine["uuid"], project=member.project)))
    # and the admin's configs stay invisible to it
    assert all(c["project_id"] == member.project for c in member.client.get(C).json)


def test_set_and_nodes_targets(admin, node):
    s = node_set(admin)
    created(admin.post(C, config_body(node["uuid"], target={"kind": "node_set",
                                                            "node_set": s["uuid"]})))
    created(admin.post(C, config_body(node["uuid"], target={"kind": "nodes",
                                                            "nodes": [node["uuid"]]})))


def test_put_returns_status_to_new_and_checks_again(server, admin, node):
    config = created(admin.post(C, config_body(node["uuid"])))
    server.store.collection("config_configs").update(
        config["uuid"], {"status": "ACTIVE", "node_status": {node["uuid"]: {"status": "ACTIVE"}}})
    # a client may PUT back what it read (read-only fields unchanged are ignored)
    shown = admin.get(f"{C}/{config['uuid']}").json
    resp = admin.put(f"{C}/{config['uuid']}", {**shown, "mode": "0640"})
    assert resp.status == 200, resp
    assert resp.json["status"] == "NEW" and resp.json["mode"] == "0640"
    assert "status" in refused(admin.put(f"{C}/{config['uuid']}", {"status": "ERROR"}), 403)
    bad = {"body": {"kind": "template", "template": "{{ nope }}"}}
    assert "names no variable" in refused(admin.put(f"{C}/{config['uuid']}", bad), 400)
    assert "project_id" in refused(admin.put(f"{C}/{config['uuid']}",
                                             {"project_id": str(uuid.uuid4())}), 403)
    assert admin.get(f"{C}/{config['uuid']}").json["mode"] == "0640"


def test_delete(admin, node):
    config = created(admin.post(C, config_body(node["uuid"])))
    assert admin.delete(f"{C}/{config['uuid']}").status == 204
    assert refused(admin.get(f"{C}/{config['uuid']}"), 404)
    assert refused(admin.delete(f"{C}/{config['uuid']}"), 404)


def test_a_manifest_plans_a_config_linking_its_password(admin, node):
    # the f-string hole gives the password's uuid, so the config stores a link, not the value
    manifest = {"name": f"m{uuid.uuid4().hex[:8]}", "version": "1.0.0", "resources": {
        "$core.secret.passwords": {"db": {"name": f"db{uuid.uuid4().hex[:8]}",
                                          "project_id": node["project_id"]}},
        "$core.config.configs": {"db_conf": {
            "project_id": node["project_id"], "path": "/etc/db.conf",
            "target": {"kind": "node", "node": node["uuid"]},
            "body": {"kind": "template", "template": "pw={{ pw }}", "variables": {
                "pw": 'f"$core.secret.passwords.${$core.secret.passwords.$db}:value"'}}}}}}
    resp = admin.post("/v1/em/manifests", manifest)
    assert resp.status == 201, resp
    bad = {**manifest, "name": manifest["name"] + "x", "resources": {
        "$core.config.configs": {"c": {**manifest["resources"]["$core.config.configs"][
            "db_conf"], "mode": "777"}}}}
    assert "mode" in refused(admin.post("/v1/em/manifests", bad), 400)
