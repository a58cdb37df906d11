"""The payload long poll and the report, against a real API."""

import threading
import time

from appliance.agent import protocol
from tests.agent.conftest import NODES, add_file, agent_token, enroll, hw_node, refused


def setup_agent(server, admin):
    node = hw_node(admin)
    cred = enroll(server, admin, node["uuid"])
    client = server.client(agent_token(server, cred))
    return node, cred, client


def poll(client, cred, **query):
    return client.get(f"/v1/ua/agents/{cred['agent']}/payload", query=query)


def hub(server):
    return server.api.resources["/v1/ua/agents"].hub


def test_payload_items_and_hashes(capserver, capadmin):
    node, cred, client = setup_agent(capserver, capadmin)
    target = {"kind": "node", "node": node["uuid"]}
    rec = add_file(capserver.store, target, "/etc/a", "one")
    add_file(capserver.store, target, "/etc/b", None, unavailable="secret x has no value yet")
    body = poll(client, cred).json
    by_path = {i["master"]: i for i in body["resources"]}
    item = by_path[rec["uuid"]]
    assert item["uuid"] == protocol.target_uuid(node["uuid"], "testfile", rec["uuid"])
    assert item["hash"] == protocol.item_hash(item)
    assert body["hash"] == protocol.payload_hash(body["resources"])
    waiting = [i for i in body["resources"] if i.get("unavailable")]
    assert waiting and waiting[0]["value"] is None
    # a stale hash answers at once; the current one with wait=0 too
    assert poll(client, cred, hash="stale", wait=30).json["hash"] == body["hash"]
    assert poll(client, cred, hash=body["hash"]).json["hash"] == body["hash"]


def test_long_poll_answers_a_change_at_once(capserver, capadmin):
    node, cred, client = setup_agent(capserver, capadmin)
    target = {"kind": "node", "node": node["uuid"]}
    add_file(capserver.store, target, "/etc/x", "v1")
    first = poll(client, cred).json
    answers = []

    def waiter():
        answers.append((poll(client, cred, hash=first["hash"], wait=20), time.monotonic()))
    t = threading.Thread(target=waiter)
    t.start()
    while hub(capserver).waiting < 1:
        time.sleep(0.01)
    written = time.monotonic()
    add_file(capserver.store, target, "/etc/y", "v2")
    t.join(25)
    resp, answered = answers[0]
    assert resp.status == 200 and resp.json["hash"] != first["hash"]
    assert {i["value"]["path"] for i in resp.json["resources"]} == {"/etc/x", "/etc/y"}
    # the issue wants a change on the node "well under a second"; the answer itself is
    # milliseconds on an idle machine, 1 s leaves room for a loaded one
    assert answered - written < 1.0


def test_long_poll_times_out_with_the_same_payload(capserver, capadmin):
    node, cred, client = setup_agent(capserver, capadmin)
    first = poll(client, cred).json
    started = time.monotonic()
    again = poll(client, cred, hash=first["hash"], wait=0.5)
    assert again.status == 200 and again.json == first
    assert time.monotonic() - started >= 0.5
    # a change elsewhere (another node's file) wakes it but does not answer it
    other = hw_node(capadmin)
    timer = threading.Timer(0.2, add_file, (capserver.store, {"kind": "node", "node":
                                                              other["uuid"]}, "/etc/o", "o"))
    timer.start()
    started = time.monotonic()
    assert poll(client, cred, hash=first["hash"], wait=1).json == first
    assert time.monotonic() - started >= 1.0
    timer.join()


def test_bad_polls(capserver, capadmin):
    node, cred, client = setup_agent(capserver, capadmin)
    for wait in ("-1", "31", "nan", "x", "1e400"):
        refused(poll(client, cred, wait=wait), 400)
    refused(capadmin.get(f"/v1/ua/agents/{'0' * 8}-0000-4000-8000-{'0' * 12}/payload"), 404)
    assert capadmin.delete(f"{NODES}/{node['uuid']}").status == 204
    assert "no longer exists" in refused(poll(client, cred), 409)


def test_polls_over_the_limit_answer_at_once(tmp_path):
    from tests.apiserver import ApiServer
    from tests.conftest import ADMIN_PASSWORD
    # 4 threads, 3 of them for long polls (agent_poll_share 0.75)
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, api_threads=4).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        node, cred, client = setup_agent(srv, admin)
        current = poll(client, cred).json["hash"]
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(
            poll(client, cred, hash=current, wait=20))) for _ in range(3)]
        for t in threads:
            t.start()
        while hub(srv).waiting < 3:
            time.sleep(0.01)
        started = time.monotonic()
        over = poll(client, cred, hash=current, wait=20)
        assert over.status == 200 and over.header("Retry-After") == "1"
        assert over.json["hash"] == current and time.monotonic() - started < 5
        # the one thread left serves everything else
        assert admin.get("/v1/ua/agents").status == 200
        add_file(srv.store, {"kind": "node", "node": node["uuid"]}, "/etc/z", "z")
        for t in threads:
            t.join(25)
        assert len(answers) == 3 and all(a.json["hash"] != current for a in answers)
    finally:
        srv.stop()


def test_report_and_target_resources(capserver, capadmin):
    node, cred, client = setup_agent(capserver, capadmin)
    target = {"kind": "node", "node": node["uuid"]}
    one = add_file(capserver.store, target, "/etc/one", "1")
    two = add_file(capserver.store, target, "/etc/two", "2")
    items = poll(client, cred).json["resources"]
    report = f"/v1/ua/agents/{cred['agent']}/actions/report/invoke"

    def actual(item, status="ACTIVE", **kw):
        return {"uuid": item["uuid"], "kind": item["kind"], "master": item["master"],
                "hash": item["hash"], "status": status, "reason": None, "value": {}, **kw}
    targets = {t["res_uuid"]: t for t in capadmin.get(
        "/v1/ua/target_resources", query={"node": node["uuid"]}).json}
    assert {t["status"] for t in targets.values()} == {"NEW"}
    assert set(targets) == {one["uuid"], two["uuid"]}
    resp = client.post(report, {"resources": [actual(i) for i in items], "full": True})
    assert resp.status == 200 and resp.json["stored"] == 2
    targets = {t["res_uuid"]: t for t in capadmin.get(
        "/v1/ua/target_resources", query={"node": node["uuid"]}).json}
    assert targets[one["uuid"]]["status"] == "ACTIVE" and "value" not in targets[one["uuid"]]
    assert targets[one["uuid"]]["agent"] == cred["agent"]
    # an ERROR with its reason; then a full report without `two` drops its row
    bad = actual(items[0], "ERROR", reason="disk full")
    assert client.post(report, {"resources": [bad]}).status == 200
    row = capadmin.get(f"/v1/ua/resources/{items[0]['uuid']}").json
    assert row["status"] == "ERROR" and row["reason"] == "disk full"
    kept = next(i for i in items if i["master"] == one["uuid"])
    client.post(report, {"resources": [actual(kept)], "full": True})
    rows = capadmin.get("/v1/ua/resources", query={"node": node["uuid"]}).json
    assert [r["res_uuid"] for r in rows] == [one["uuid"]]
    client.post(report, {"removed": [kept["uuid"]]})
    assert capadmin.get("/v1/ua/resources", query={"node": node["uuid"]}).json == []
    # bad reports: 400 and nothing stored
    for body in ({"resources": [{**actual(kept), "status": "DONE"}]},
                 {"resources": [{k: v for k, v in actual(kept).items() if k != "hash"}]},
                 {"resources": "x"}, {"removed": ["not-a-uuid"]}, {"full": "yes"},
                 {"extra": 1}, [1]):
        refused(client.post(report, body), 400)
    assert capadmin.get("/v1/ua/resources", query={"node": node["uuid"]}).json == []
