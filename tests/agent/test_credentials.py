"""Enrollment, the agents' client_credentials grant and what an agent's token may do."""

import base64
import datetime
import json
import uuid

from appliance.agent.protocol import target_uuid
from tests.agent import testcap
from tests.agent.conftest import (NODES, add_file, agent_token, enroll, hw_node, refused)
from tests.apiserver import TOKEN_PATH
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import bind, make_project, make_user


def grant(server, agent, secret):
    return server.client().post(TOKEN_PATH, {"grant_type": "client_credentials",
                                             "client_id": agent, "client_secret": secret})


def test_enrollment_token_is_single_use_and_hashed(capserver, capadmin):
    node = hw_node(capadmin)
    minted = capadmin.post(f"{NODES}/{node['uuid']}/actions/enroll/invoke")
    assert minted.status == 200 and set(minted.json) == {"token", "expires_at"}
    stored = capserver.store.collection("ua_enrollments").find_one(node=node["uuid"])
    assert minted.json["token"] not in str(stored)          # only its hash is kept
    first = capserver.client().post("/v1/ua/enroll", {"token": minted.json["token"],
                                                      "name": "rack-1"})
    assert first.status == 200, first
    assert first.json["node"] == node["uuid"] and first.json["agent"] == node["uuid"]
    agent = capadmin.get(f"/v1/ua/agents/{first.json['agent']}").json
    assert agent["name"] == "rack-1" and agent["status"] == "ACTIVE"
    assert "secret_hash" not in agent and "credential" not in agent
    assert first.json["secret"] not in str(capserver.store.collection("ua_agents").records())
    again = capserver.client().post("/v1/ua/enroll", {"token": minted.json["token"]})
    assert "already used" in refused(again, 401)


def test_wrong_and_expired_enrollment_tokens(capserver, capadmin):
    node = hw_node(capadmin)
    assert "unknown" in refused(capserver.client().post("/v1/ua/enroll", {"token": "nope"}), 401)
    minted = capadmin.post(f"{NODES}/{node['uuid']}/actions/enroll/invoke", {"ttl": 60}).json
    enrollments = capserver.store.collection("ua_enrollments")
    record = enrollments.find_one(node=node["uuid"])
    past = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1))
    enrollments.update(record["uuid"], {"expires_at": past.strftime("%Y-%m-%dT%H:%M:%S.%fZ")})
    assert "expired" in refused(capserver.client().post("/v1/ua/enroll",
                                                        {"token": minted["token"]}), 401)
    assert capserver.store.collection("ua_agents").find_one(node=node["uuid"]) is None
    # bad bodies: 400 and nothing minted or enrolled
    for body in ({}, {"token": 5}, {"token": "x", "extra": 1}, {"token": "x", "name": ""}):
        refused(capserver.client().post("/v1/ua/enroll", body), 400)
    for body in ({"ttl": 5}, {"ttl": "3600"}, {"other": 1}, [1]):
        refused(capadmin.post(f"{NODES}/{node['uuid']}/actions/enroll/invoke", body), 400)
    refused(capadmin.post(f"{NODES}/{'0' * 8}-0000-4000-8000-{'0' * 12}/actions/enroll/invoke"),
            404)


def test_only_the_platform_mints_enrollment_tokens(capserver, capadmin):
    node = hw_node(capadmin)
    project = capadmin.post("/v1/iam/projects", {"name": "p-enroll", "organization":
                                                 "00000000-0000-0000-0000-000000000000"}).json
    scoped = capserver.client(capserver.login("admin", ADMIN_PASSWORD,
                                              scope=f"project:{project['uuid']}"))
    refused(scoped.post(f"{NODES}/{node['uuid']}/actions/enroll/invoke"), 403)
    refused(capserver.client().post(f"{NODES}/{node['uuid']}/actions/enroll/invoke"), 401)


def test_client_credentials_and_reenrollment(capserver, capadmin):
    node = hw_node(capadmin)
    old = enroll(capserver, capadmin, node["uuid"])
    token = agent_token(capserver, old)
    payload = f"/v1/ua/agents/{old['agent']}/payload"
    assert capserver.client(token).get(payload).status == 200
    wrong = grant(capserver, old["agent"], "wrong")
    assert wrong.status == 401 and wrong.json["error"] == "invalid_client"
    assert grant(capserver, "not-a-uuid", old["secret"]).status == 401
    assert grant(capserver, old["agent"], "").status == 400
    new = enroll(capserver, capadmin, node["uuid"])
    assert new["agent"] == old["agent"] and new["secret"] != old["secret"]
    # the old secret and every token it gave are dead; the new one works
    assert grant(capserver, old["agent"], old["secret"]).status == 401
    assert "replaced" in refused(capserver.client(token).get(payload), 401)
    assert capserver.client(agent_token(capserver, new)).get(payload).status == 200


def test_agent_token_permission_matrix(capserver, capadmin):
    mine, other = hw_node(capadmin), hw_node(capadmin)
    cred, other_cred = (enroll(capserver, capadmin, n["uuid"]) for n in (mine, other))
    agent = capserver.client(agent_token(capserver, cred))
    add_file(capserver.store, {"kind": "node", "node": mine["uuid"]}, "/etc/mine", "a")
    add_file(capserver.store, {"kind": "node", "node": other["uuid"]}, "/etc/theirs", "b")
    own = agent.get(f"/v1/ua/agents/{cred['agent']}/payload")
    assert own.status == 200
    assert [i["value"]["path"] for i in own.json["resources"]] == ["/etc/mine"]
    item = own.json["resources"][0]
    report = {"resources": [{"uuid": item["uuid"], "kind": item["kind"],
                             "master": item["master"], "hash": item["hash"],
                             "status": "ACTIVE", "reason": None, "value": {}}]}
    assert agent.post(f"/v1/ua/agents/{cred['agent']}/actions/report/invoke",
                      report).status == 200
    # another agent's payload and report, and any other route: 403
    refused(agent.get(f"/v1/ua/agents/{other_cred['agent']}/payload"), 403)
    refused(agent.post(f"/v1/ua/agents/{other_cred['agent']}/actions/report/invoke", report),
            403)
    for path in ("/v1/ua/agents", f"/v1/ua/agents/{cred['agent']}", "/v1/ua/resources",
                 "/v1/ua/target_resources", f"{NODES}/{mine['uuid']}", NODES,
                 "/v1/secret/passwords", "/v1/iam/users",
                 "/v1/iam/clients/default/actions/introspect",
                 "/v1/iam/clients/default/actions/me"):
        refused(agent.get(path), 403)
    refused(agent.post("/v1/iam/clients/default/actions/logout/invoke"), 403)
    refused(agent.post(f"{NODES}/{mine['uuid']}/actions/enroll/invoke"), 403)
    refused(agent.post("/v1/secret/passwords", {"name": "x"}), 403)
    # its own agent's report cannot write another node's state: the uuid binds the node
    forged = {"resources": [{**report["resources"][0], "uuid": target_uuid(
        other["uuid"], testcap.KIND, item["master"])}]}
    before = capserver.store.collection("ua_resources").records()
    assert "not the target" in refused(agent.post(
        f"/v1/ua/agents/{cred['agent']}/actions/report/invoke", forged), 400)
    assert capserver.store.collection("ua_resources").records() == before
    # an admin reads everything an agent wrote
    rows = capadmin.get("/v1/ua/resources", query={"node": mine["uuid"]}).json
    assert [r["uuid"] for r in rows] == [item["uuid"]] and "value" not in rows[0]


def test_agents_create_list_get(capserver, capadmin):
    node = hw_node(capadmin)
    made = capadmin.post("/v1/ua/agents", {"name": "a1", "node": node["uuid"]})
    assert made.status == 201, made
    agent = made.json
    assert agent["status"] == "NEW" and agent["capabilities"] == {"capabilities": []}
    assert agent["facts"] == {"facts": []} and agent["node"] == node["uuid"]
    assert not {"secret_hash", "credential", "secret_sealed"} & set(agent)
    assert capadmin.get(f"/v1/ua/agents/{agent['uuid']}").json == agent
    assert [a["uuid"] for a in capadmin.get("/v1/ua/agents", query={
        "node": node["uuid"]}).json] == [agent["uuid"]]
    # one agent per node; the node must exist; no secret through the API; no update
    assert "already exists" in refused(capadmin.post(
        "/v1/ua/agents", {"name": "a2", "node": node["uuid"]}), 409)
    refused(capadmin.post("/v1/ua/agents", {"name": "a3",
                                            "node": "5b0c9a1e-0000-4000-8000-000000000001"}),
            400)
    refused(capadmin.post("/v1/ua/agents", {"name": "a4", "node": hw_node(capadmin)["uuid"],
                                            "secret_hash": "x"}), 400)
    refused(capadmin.post("/v1/ua/agents", {"node": hw_node(capadmin)["uuid"]}), 400)
    refused(capadmin.post("/v1/ua/agents", {"name": "a5", "node": hw_node(capadmin)["uuid"],
                                            "status": "ACTIVE"}), 403)
    assert capadmin.put(f"/v1/ua/agents/{agent['uuid']}", {"name": "x"}).status == 405
    # an agent made through the API has no secret until its node is enrolled
    assert grant(capserver, agent["uuid"], "anything").status == 401
    assert enroll(capserver, capadmin, node["uuid"])["agent"] == agent["uuid"]


def test_issue_key_as_the_reference_cli_calls_it(capserver, capadmin):
    """`hypervisors init --add` of the reference CLI: POST /v1/ua/agents/ (a 409 is fine
    for it), then POST issue_key with an empty JSON body, and writes `key` to its file."""
    node = hw_node(capadmin)
    made = capadmin.post("/v1/ua/agents/", {
        "uuid": node["uuid"], "name": f"universal_agent_{node['uuid'][:8]}",
        "node": node["uuid"], "capabilities": {"capabilities": [
            "pool", "pool_volume", "pool_machine", "local_pool"]}, "facts": {"facts": []}})
    assert made.status == 201, made
    url = f"/v1/ua/agents/{node['uuid']}/actions/issue_key/invoke"
    issued = capadmin.post(url, {})
    assert issued.status == 200, issued
    assert set(issued.json) == {"key"}
    key = issued.json["key"]
    assert len(base64.b64decode(key, validate=True)) == 32
    # the node's key: stable, the same as the node's get_private_key, sealed at rest
    assert capadmin.post(url, {}).json == {"key": key}
    assert capadmin.post(url).json == {"key": key}
    assert capadmin.get(f"{NODES}/{node['uuid']}/actions/get_private_key").json == key
    assert key not in json.dumps(capserver.store.collection("compute_nodes").get(
        node["uuid"]))
    # unknown agent: 404; a body the action does not take: 400
    refused(capadmin.post(f"/v1/ua/agents/{uuid.uuid4()}/actions/issue_key/invoke", {}), 404)
    refused(capadmin.post(url, {"node": node["uuid"]}), 400)


def test_issue_key_is_the_platforms(capserver, capadmin):
    """A project's owner or reader (even of the agent's own node's project), an agent's
    own token and an admin token scoped to a project: 403, and no key is made."""
    project = make_project(capadmin)
    owner_user, owner, owner_pw = make_user(capadmin)
    reader_user, reader, reader_pw = make_user(capadmin)
    bind(capadmin, owner_user, "owner", project)
    bind(capadmin, reader_user, "reader", project)
    node = hw_node(capadmin, project_id=project)
    key_before = capserver.store.collection("compute_nodes").get(node["uuid"])["agent_key"]
    agent = capadmin.post("/v1/ua/agents", {"name": "p-agent", "node": node["uuid"]})
    assert agent.status == 201, agent
    url = f"/v1/ua/agents/{agent.json['uuid']}/actions/issue_key/invoke"
    agent_client = capserver.client(agent_token(capserver, enroll(
        capserver, capadmin, hw_node(capadmin)["uuid"])))
    callers = [capserver.client(capserver.login(name, pw, scope=f"project:{project}"))
               for name, pw in ((owner, owner_pw), (reader, reader_pw), ("admin",
                                                                         ADMIN_PASSWORD))]
    for caller in callers + [agent_client]:
        refused(caller.post(url, {}), 403)
        # the same for an agent that does not exist: nothing tells them which do
        refused(caller.post(f"/v1/ua/agents/{uuid.uuid4()}/actions/issue_key/invoke", {}),
                403)
    refused(capserver.client().post(url, {}), 401)
    assert capserver.store.collection("compute_nodes").get(node["uuid"])["agent_key"] \
        == key_before
