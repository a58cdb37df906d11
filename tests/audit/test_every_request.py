"""Every state-changing request of the API leaves an entry with its actor.

The routes come from the OpenAPI document, so a route added later is covered without
touching this test. Each POST/PUT/PATCH/DELETE route is called once by the admin with an
id of our own (X-Request-Id) and path parameters that name nothing: most answers are 400
or 404, and an entry is owed for every one of them, as for the successful calls of the
representative set below (a create, an update, an action and a delete per kind of call).
"""

import re
import uuid

from tests.audit.conftest import entries
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import make_project

PARAM = re.compile(r"\{(\w+)\}|<(\w+)>")
WRITES = ("post", "put", "patch", "delete")


def _request_ids(admin):
    return {e["request_id"]: e for e in entries(admin)}


def _admin_uuid(admin):
    return admin.get("/v1/iam/users", query={"username": "admin"}).json[0]["uuid"]


def test_every_write_route_of_the_openapi_document_is_in_the_trail(server):
    # a token of its own: the logout route revokes it
    admin = server.client(server.login("admin", ADMIN_PASSWORD))
    document = admin.get("/v1/openapi.json").json
    admin_uuid = _admin_uuid(admin)
    calls = []
    for path, operations in document["paths"].items():
        for method in WRITES:
            if method in operations:
                public = operations[method].get("x-permission") == "public"
                calls.append((method.upper(), path, public))
    # logging out revokes the admin's token: last
    calls.sort(key=lambda c: "logout" in c[1])
    assert any(public for _, _, public in calls)
    assert len(calls) > 100, "the document lists fewer write routes than the API has"
    made = {}
    for method, template, public in calls:
        path = PARAM.sub(lambda _: str(uuid.uuid4()), template)
        request_id = f"audit-{uuid.uuid4().hex}"
        resp = admin.request(method, path, {} if method != "DELETE" else None,
                             headers={"X-Request-Id": request_id})
        assert resp.status < 500, (method, path, resp)
        made[request_id] = (method, template, resp.status, public)
    admin = server.client(server.login("admin", ADMIN_PASSWORD))
    found = _request_ids(admin)
    missing = [f"{m} {t}" for rid, (m, t, *_) in made.items() if rid not in found]
    assert not missing, f"requests with no audit entry: {missing}"
    for request_id, (method, template, status, public) in made.items():
        item = found[request_id]
        assert (item["method"], item["status"]) == (method, status), item
        assert item["route"] == PARAM.sub(lambda m: f"<{m.group(1) or m.group(2)}>",
                                          template).rstrip("/"), item
        assert item["source"] == "127.0.0.1"
        if public:
            # no token is read: the actor is who logged in (none here), or nobody
            assert item["actor"] is None, item
            continue
        assert item["actor"]["type"] == "user" and item["actor"]["id"] == admin_uuid, item
        assert item["actor"]["name"] == "admin"


def test_a_representative_set_of_real_changes_names_the_resource_and_project(server, admin):
    project = make_project(admin)
    steps = []

    def call(method, path, body=None):
        request_id = f"audit-{uuid.uuid4().hex}"
        resp = admin.request(method, path, body, headers={"X-Request-Id": request_id})
        assert resp.status < 300, resp
        steps.append((request_id, method, resp))
        return resp

    secret = call("POST", "/v1/secret/secrets/", {"name": "s-rep", "project_id": project,
                                                   "value": "not-recorded-1"}).json
    call("PUT", f"/v1/secret/secrets/{secret['uuid']}", {"description": "changed"})
    domain = call("POST", "/v1/dns/domains/", {"name": "rep.example.", "project_id": project}).json
    record = call("POST", f"/v1/dns/domains/{domain['uuid']}/records/",
                  {"type": "A", "record": {"kind": "A", "name": "www",
                                           "address": "192.0.2.1"}}).json
    call("DELETE", f"/v1/dns/domains/{domain['uuid']}/records/{record['uuid']}")
    call("DELETE", f"/v1/secret/secrets/{secret['uuid']}")
    found = _request_ids(admin)
    expected = [("secret_secrets", secret["uuid"]), ("secret_secrets", secret["uuid"]),
                ("dns_domains", domain["uuid"]), ("dns_records", record["uuid"]),
                ("dns_records", record["uuid"]), ("secret_secrets", secret["uuid"])]
    for (request_id, method, resp), (kind, resource) in zip(steps, expected):
        item = found[request_id]
        assert (item["method"], item["status"]) == (method, resp.status)
        assert (item["kind"], item["resource_uuid"], item["project_id"]) == \
            (kind, resource, project), item


def test_a_login_is_in_the_trail_whether_it_succeeds_or_not(server, admin):
    good = server.token_response("admin", ADMIN_PASSWORD, source="127.0.0.3")
    bad = server.token_response("nobody-such", "wrong-password-audit", source="127.0.0.4")
    assert (good.status, bad.status) == (200, 400)
    found = _request_ids(admin)
    ok = found[good.header("X-Request-Id")]
    refused = found[bad.header("X-Request-Id")]
    assert ok["login"] == {"username": "admin", "succeeded": True}
    assert ok["actor"]["name"] == "admin" and ok["source"] == "127.0.0.3"
    assert refused["login"] == {"username": "nobody-such", "succeeded": False}
    assert refused["actor"] is None and refused["source"] == "127.0.0.4"
    assert refused["status"] == 400
    # filterable by the username tried
    assert [e["request_id"] for e in entries(admin, actor="nobody-such")] == \
        [bad.header("X-Request-Id")]


def test_reads_are_not_in_the_trail(server, admin):
    resp = admin.get("/v1/iam/projects/")
    assert resp.status == 200
    assert resp.header("X-Request-Id") not in _request_ids(admin)


def test_filters_and_paging(server, admin):
    project = make_project(admin)
    for i in range(3):
        assert admin.post("/v1/secret/secrets/", {"name": f"page-{i}", "project_id": project,
                                                  "value": f"page-value-{i}"}).status == 201
    mine = entries(admin, project_id=project, kind="secret_secrets")
    assert len(mine) == 3 and all(e["method"] == "POST" for e in mine)
    since = mine[1]["created_at"]
    # the same moment given in another zone
    import datetime
    moment = datetime.datetime.fromisoformat(since.replace("Z", "+00:00"))
    elsewhere = moment.astimezone(datetime.timezone(datetime.timedelta(hours=2))).isoformat()
    assert [e["uuid"] for e in entries(admin, project_id=project, since=elsewhere)] == \
        [e["uuid"] for e in mine[1:]]
    assert [e["uuid"] for e in entries(admin, project_id=project, since=since)] == \
        [e["uuid"] for e in mine[1:]]
    assert entries(admin, project_id=project, until=mine[0]["created_at"]) == \
        [e for e in entries(admin, project_id=project) if e["created_at"] < since
         and e["uuid"] != mine[0]["uuid"]]
    first = admin.get("/v1/audit/", query={"project_id": project, "page_limit": 2})
    assert [e["uuid"] for e in first.json] == [e["uuid"] for e in
                                              entries(admin, project_id=project)][:2]
    marker = first.header("X-Pagination-Marker")
    rest = admin.get("/v1/audit/", query={"project_id": project, "page_limit": 2,
                                           "page_marker": marker}).json
    assert [e["uuid"] for e in first.json + rest] == \
        [e["uuid"] for e in entries(admin, project_id=project)][:4]
    # newest first, paged the same way
    ordered = [e["uuid"] for e in entries(admin, project_id=project)]
    newest = admin.get("/v1/audit/", query={"project_id": project, "sort_dir": "desc",
                                            "page_limit": 2})
    older = admin.get("/v1/audit/", query={
        "project_id": project, "sort_dir": "desc", "page_limit": 2,
        "page_marker": newest.header("X-Pagination-Marker")}).json
    assert [e["uuid"] for e in newest.json + older] == ordered[::-1][:4]
    for bad in ({"since": "yesterday"}, {"colour": "red"}, {"page_marker": "x",
                                                             "page_limit": 1},
                {"page_limit": 1, "page_marker": "00000000-0000-4000-8000-000000000000"},
                {"sort_key": "path"}, {"page_limit": 0}):
        resp = admin.get("/v1/audit/", query=bad)
        assert resp.status == 400 and resp.json["message"], resp


def test_concurrent_writes_and_reads_lose_no_entry_and_never_fail(server, admin):
    import concurrent.futures
    project = make_project(admin)

    def write(i):
        resp = admin.post("/v1/secret/secrets/", {"name": f"busy-{i}", "project_id": project,
                                                  "value": f"busy-value-{i}"})
        return resp.status, resp.header("X-Request-Id")

    def read(_):
        resp = admin.get("/v1/audit/", query={"project_id": project, "page_limit": 20})
        return resp.status, None

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(write, i) for i in range(40)]
        futures += [pool.submit(read, i) for i in range(20)]
        results = [f.result() for f in futures]
    assert all(status in (200, 201) for status, _ in results), results
    written = {rid for status, rid in results if status == 201}
    assert len(written) == 40
    assert written <= {e["request_id"] for e in entries(admin, project_id=project)}
