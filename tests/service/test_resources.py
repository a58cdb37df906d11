"""The services API against a real server: shapes, defaults, bad inputs, actions,
permissions and the monopoly lease."""

import threading
import uuid

import pytest

from tests.conftest import ADMIN_PASSWORD
from tests.apiserver import ApiServer

from .conftest import SVC, Member, created, hw_node, refused, service_body


def count(server):
    return len(server.store.collection("em_services").records())


def test_create_fills_the_reference_defaults(admin, node):
    svc = created(admin.post(SVC, service_body(node, name="")))
    assert svc["name"] == "" and svc["description"] == ""
    assert svc["user"] == "root" and svc["group"] is None
    assert svc["before"] == [] and svc["after"] == []
    assert svc["target_status"] == "enabled"
    assert svc["service_type"] == {"kind": "simple", "count": 1}
    assert svc["status"] == "NEW" and svc["node_status"] == {}
    assert svc["restart_counter"] == 0 and svc["update_counter"] == 0
    assert admin.get(f"{SVC}/{svc['uuid']}").json == svc
    assert svc["uuid"] in [s["uuid"] for s in admin.get(SVC).json]


@pytest.mark.parametrize("fields, where", [
    ({"name": "has space"}, "name"),
    ({"name": "x" * 101}, "name"),
    ({"path": ""}, "path"),
    ({"path": "echo a\necho b"}, "path"),
    ({"path": "echo \r"}, "path"),
    ({"path": "x" * 262145}, "path"),
    ({"user": "root; rm -rf /"}, "user"),
    ({"user": ""}, "user"),
    ({"group": "a b"}, "group"),
    ({"target": {"kind": "node"}}, "target"),
    ({"target": {"kind": "cluster", "node": str(uuid.uuid4())}}, "target"),
    ({"target": {"kind": "node", "node": str(uuid.uuid4())}}, "target"),
    ({"target": {"kind": "node_set", "node_set": str(uuid.uuid4())}}, "target"),
    ({"service_type": {"kind": "daemon"}}, "service_type"),
    ({"service_type": {"kind": "simple", "count": 0}}, "service_type"),
    ({"service_type": {"kind": "simple", "count": 1001}}, "service_type"),
    ({"service_type": {"kind": "monopoly", "count": 2}}, "service_type"),
    ({"service_type": {"kind": "oneshot", "count": 1}}, "service_type"),
    ({"before": [{"kind": "service", "service": str(uuid.uuid4())}]}, "before.0.service"),
    ({"after": [{"kind": "shell"}]}, "after"),
    ({"after": [{"kind": "shell", "command": "a\nb"}]}, "after"),
    ({"target_status": "running"}, "target_status"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_inputs_are_400_and_create_nothing(server, admin, node, fields, where):
    before = count(server)
    message = refused(admin.post(SVC, service_body(node, **fields)), 400)
    assert where in message
    assert count(server) == before


@pytest.mark.parametrize("missing", ["path", "target", "service_type", "project_id"])
def test_required_fields(server, admin, node, missing):
    body = service_body(node)
    del body[missing]
    assert missing in refused(admin.post(SVC, body), 400)


def test_a_service_cannot_order_itself(admin, node):
    mine = str(uuid.uuid4())
    body = service_body(node, uuid=mine, after=[{"kind": "service", "service": mine}])
    assert "itself" in refused(admin.post(SVC, body), 400)


def test_read_only_fields_are_403(admin, node):
    svc = created(admin.post(SVC, service_body(node)))
    for field, value in [("status", "ACTIVE"), ("restart_counter", 5),
                         ("node_status", {"x": {}}), ("status_reason", "x")]:
        assert field in refused(admin.put(f"{SVC}/{svc['uuid']}", {field: value}), 403)
    assert refused(admin.post(SVC, service_body(node, status="ACTIVE")), 403)


def test_put_returns_status_to_new(server, admin, node):
    svc = created(admin.post(SVC, service_body(node)))
    server.store.collection("em_services").update(svc["uuid"], {"status": "ACTIVE"})
    updated = admin.put(f"{SVC}/{svc['uuid']}", {"path": "exec sleep 100",
                                                 "service_type": {"kind": "oneshot"}}).json
    assert updated["status"] == "NEW" and updated["path"] == "exec sleep 100"
    assert updated["service_type"] == {"kind": "oneshot"}
    # a PUT of bad values changes nothing
    assert refused(admin.put(f"{SVC}/{svc['uuid']}", {"path": "a\nb"}), 400)
    # (a null user is "not given", docs/validation.md: an empty one is the bad value)
    assert refused(admin.put(f"{SVC}/{svc['uuid']}", {"user": ""}), 400)
    assert admin.get(f"{SVC}/{svc['uuid']}").json == updated


def test_ordering_names_services_of_the_same_project(admin, node, server):
    first = created(admin.post(SVC, service_body(node)))
    second = created(admin.post(SVC, service_body(node, before=[
        {"kind": "service", "service": first["uuid"].upper()},
        {"kind": "shell", "command": "echo pre"}])))
    assert second["before"][0] == {"kind": "service", "service": first["uuid"]}
    # the first cannot go while the second orders itself after it
    assert "before" in refused(admin.delete(f"{SVC}/{first['uuid']}"), 409)
    assert admin.put(f"{SVC}/{second['uuid']}", {"before": []}).status == 200
    assert admin.delete(f"{SVC}/{first['uuid']}").status == 204
    assert admin.delete(f"{SVC}/{first['uuid']}").status == 404
    other = Member(server, admin)
    theirs = created(other.client.post(SVC, service_body(
        hw_node(admin, other.project)["uuid"], project_id=other.project)))
    assert "before.0.service" in refused(admin.post(SVC, service_body(
        node, before=[{"kind": "service", "service": theirs["uuid"]}])), 400)


def test_actions_move_the_desired_state(admin, node):
    svc = created(admin.post(SVC, service_body(node)))
    act = f"{SVC}/{svc['uuid']}/actions"
    steps = [("stop", "stopped"), ("stop", "stopped"), ("start", "enabled"),
             ("start", "enabled")]
    for action, expected in steps:
        resp = admin.post(f"{act}/{action}/invoke", {})
        assert resp.status == 200, resp
        assert resp.json["target_status"] == expected and resp.json["status"] == "NEW"
    admin.put(f"{SVC}/{svc['uuid']}", {"target_status": "started"})
    assert admin.post(f"{act}/stop/invoke").json["target_status"] == "disabled"
    assert "start it" in refused(admin.post(f"{act}/restart/invoke", {}), 409)
    assert admin.post(f"{act}/start/invoke").json["target_status"] == "started"
    assert admin.post(f"{act}/restart/invoke", {}).json["restart_counter"] == 1
    assert admin.post(f"{act}/restart/invoke", {}).json["restart_counter"] == 2
    assert admin.post(f"{act}/update/invoke", {}).json["update_counter"] == 1
    assert admin.get(f"{SVC}/{svc['uuid']}").json["restart_counter"] == 2
    assert refused(admin.post(f"{SVC}/{uuid.uuid4()}/actions/start/invoke", {}), 404)


def test_projects_see_and_target_only_their_own(server, admin, node):
    owner, reader = Member(server, admin), Member(server, admin, role="reader")
    mine = hw_node(admin, owner.project)["uuid"]
    # another project's node is not a target
    assert "target" in refused(owner.client.post(SVC, service_body(
        node, project_id=owner.project)), 400)
    svc = created(owner.client.post(SVC, service_body(mine, project_id=owner.project)))
    assert refused(reader.client.get(f"{SVC}/{svc['uuid']}"), 404)
    assert refused(reader.client.post(SVC, service_body(mine, project_id=reader.project)),
                   403)
    assert refused(owner.client.post(SVC, service_body(mine)), 403)   # admin project
    assert svc["uuid"] not in [s["uuid"] for s in reader.client.get(SVC).json]
    assert refused(reader.client.post(f"{SVC}/{svc['uuid']}/actions/restart/invoke"), 403)
    stranger = Member(server, admin)
    assert refused(stranger.client.post(f"{SVC}/{svc['uuid']}/actions/restart/invoke"), 404)
    assert refused(stranger.client.put(f"{SVC}/{svc['uuid']}", {"path": "x"}), 404)
    assert owner.client.post(f"{SVC}/{svc['uuid']}/actions/restart/invoke").status == 200


# ---- the monopoly lease ---------------------------------------------------------------

def lease(client, svc, node):
    return client.post(f"{SVC}/{svc}/actions/lease/invoke", {"node": node})


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    """A server whose leases last 1 s (the expiry below takes real time)."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    service_lease_seconds=1.0).start()
    yield srv
    srv.stop()


def test_the_lease_goes_to_one_node_until_it_expires(short):
    admin = short.client(short.login("admin", ADMIN_PASSWORD))
    a, b, c = (hw_node(admin)["uuid"] for _ in range(3))
    svc = created(admin.post(SVC, service_body(a, target={"kind": "nodes", "nodes": [a, b]},
                                               service_type={"kind": "monopoly"})))["uuid"]
    first = lease(admin, svc, a).json
    assert first["granted"] and first["holder"] == a and first["seconds"] == 1.0
    refused_b = lease(admin, svc, b).json
    assert refused_b == {"granted": False, "holder": a, "expires_at": first["expires_at"],
                         "seconds": 1.0}
    renewed = lease(admin, svc, a).json
    assert renewed["granted"] and renewed["expires_at"] >= first["expires_at"]
    # once a's lease runs out (nobody renews it), b takes it
    deadline = short.store.collection("em_service_leases").get(svc)["expires_at"]
    while True:
        taken = lease(admin, svc, b).json
        if taken["granted"]:
            break
        assert taken["expires_at"] == deadline
    assert taken["holder"] == b and taken["expires_at"] > deadline
    assert "does not target" in refused(lease(admin, svc, c), 400)


def test_lease_bad_inputs(server, admin, node):
    monopoly = created(admin.post(SVC, service_body(
        node, service_type={"kind": "monopoly_oneshot"})))["uuid"]
    simple = created(admin.post(SVC, service_body(node)))["uuid"]
    assert "only monopoly" in refused(lease(admin, simple, node), 400)
    for body in ({}, {"node": "x"}, {"node": node, "extra": 1}, [node]):
        refused(admin.post(f"{SVC}/{monopoly}/actions/lease/invoke", body), 400)
    assert refused(lease(admin, str(uuid.uuid4()), node), 404)
    assert server.store.collection("em_service_leases").get(monopoly) is None


def test_only_agents_and_admins_take_leases(server, admin):
    owner = Member(server, admin)
    mine = hw_node(admin, owner.project)["uuid"]
    svc = created(owner.client.post(SVC, service_body(
        mine, project_id=owner.project, service_type={"kind": "monopoly"})))["uuid"]
    assert "agent" in refused(lease(owner.client, svc, mine), 403)
    assert lease(admin, svc, mine).json["granted"]


def test_two_nodes_asking_at_once_never_both_get_it(admin):
    nodes = [hw_node(admin)["uuid"] for _ in range(4)]
    svc = created(admin.post(SVC, service_body(nodes[0], target={
        "kind": "nodes", "nodes": nodes}, service_type={"kind": "monopoly"})))["uuid"]
    answers, start = [], threading.Barrier(len(nodes))

    def ask(node):
        start.wait()
        answers.append(lease(admin, svc, node).json)
    threads = [threading.Thread(target=ask, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    granted = [a for a in answers if a["granted"]]
    assert len(answers) == len(nodes) and len(granted) == 1
    assert {a["holder"] for a in answers} == {granted[0]["holder"]}


def test_deleting_a_service_drops_its_lease(server, admin, node):
    svc = created(admin.post(SVC, service_body(node, service_type={"kind": "monopoly"})))
    assert lease(admin, svc["uuid"], node).json["granted"]
    assert admin.delete(f"{SVC}/{svc['uuid']}").status == 204
    assert server.store.collection("em_service_leases").get(svc["uuid"]) is None
