"""Enrollment, the agents' client_credentials grant and what an agent's token may do."""

import datetime

from appliance.agent.protocol import target_uuid
from tests.agent import testcap
from tests.agent.conftest import (NODES, add_file, agent_token, enroll, hw_node, refused)
from tests.apiserver import TOKEN_PATH
from tests.conftest import ADMIN_PASSWORD


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
