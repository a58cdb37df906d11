"""The REST conventions of docs/api.md, against a real Waitress server."""

import logging
import os
import re
import threading
import time
import uuid

import pytest
from openapi_spec_validator import validate

from appliance.api import conflicts
from appliance.api.routing import AUTHENTICATED
from appliance.iam.builtin import ADMIN_PROJECT
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

W = "/v1/test/widgets"


def new(admin, **fields):
    body = {"name": f"w-{uuid.uuid4().hex[:12]}", "project_id": ADMIN_PROJECT, **fields}
    resp = admin.post(W, body)
    assert resp.status == 201, resp
    return resp.json


def assert_error(resp, status, type_, *words):
    assert resp.status == status, resp
    assert resp.header("content-type").startswith("application/json")
    body = resp.json
    assert set(body) == {"type", "code", "message"}
    assert body["code"] == status
    assert body["type"] == type_
    for word in words:
        assert word in body["message"], body["message"]


# ---- the status table, one row at a time -------------------------------------------

def test_malformed_json_is_400(admin):
    assert_error(admin.post(W, raw=b'{"name": ', content_type="application/json"),
                 400, "ValidationError", "not valid JSON")


def test_wrong_content_type_is_415(admin):
    assert_error(admin.post(W, raw=b"name=x", content_type="text/plain"),
                 415, "UnsupportedMediaType", "text/plain")


def test_oversize_body_is_413(admin, server):
    limit = server.settings["max_body_bytes"]
    big = b'{"name": "' + b"x" * limit + b'"}'
    assert_error(admin.post(W, raw=big, content_type="application/json"),
                 413, "PayloadTooLarge", str(limit))
    assert admin.get(W, query={"name": "x" * 10}).json == []


def test_unknown_filter_is_400(admin):
    assert_error(admin.get(W, query={"colour": "red"}), 400, "ValidationError", "colour")


def test_wrong_type_filter_is_400(admin):
    assert_error(admin.get(W, query={"size": "big"}), 400, "ValidationError", "size",
                 "integer")
    assert_error(admin.get(W, query={"enabled": "maybe"}), 400, "ValidationError", "enabled")
    assert_error(admin.get(W, query={"owner": "not-a-uuid"}), 400, "ValidationError")


def test_read_only_field_is_403_and_changes_nothing(admin):
    w = new(admin)
    assert_error(admin.put(f"{W}/{w['uuid']}", {"status": "ACTIVE", "size": 5}),
                 403, "Forbidden", "status")
    assert_error(admin.post(W, {"name": "ro", "project_id": ADMIN_PROJECT,
                                "created_at": "2020-01-01T00:00:00Z"}), 403, "Forbidden")
    again = admin.get(f"{W}/{w['uuid']}").json
    assert again["status"] == "NEW" and again["size"] == 10
    # a read-only field sent back unchanged is accepted (PUT of what was read)
    ok = admin.put(f"{W}/{w['uuid']}", {**again, "size": 7})
    assert ok.status == 200, ok
    assert ok.json["size"] == 7


def test_create_only_field_is_403_on_update(admin):
    w = new(admin, serial=5)
    assert_error(admin.put(f"{W}/{w['uuid']}", {"serial": 6}), 403, "Forbidden", "serial")


def test_unknown_path_is_404(admin):
    assert_error(admin.get("/v1/test/nothing"), 404, "NotFound")
    assert_error(admin.get(f"{W}/{uuid.uuid4()}"), 404, "NotFound")
    assert_error(admin.get(f"{W}/not-a-uuid"), 404, "NotFound")


def test_wrong_method_is_405(admin):
    assert_error(admin.request("PATCH", W), 405, "MethodNotAllowed", "PATCH")
    assert_error(admin.request("POST", f"{W}/{uuid.uuid4()}"), 405, "MethodNotAllowed")


def test_duplicate_unique_key_is_409(admin):
    w = new(admin)
    assert_error(admin.post(W, {"name": w["name"], "project_id": ADMIN_PROJECT}),
                 409, "Conflict", w["name"])


def test_unknown_body_field_wrong_type_and_range_are_400(admin):
    assert_error(admin.post(W, {"name": "a", "project_id": ADMIN_PROJECT, "colr": "red"}),
                 400, "ValidationError", "colr")
    assert_error(admin.post(W, {"name": "a", "project_id": ADMIN_PROJECT, "size": "big"}),
                 400, "ValidationError", "size", "integer")
    assert_error(admin.post(W, {"name": "a", "project_id": ADMIN_PROJECT, "size": 101}),
                 400, "ValidationError", "size", "100")
    assert_error(admin.post(W, {"name": "A!", "project_id": ADMIN_PROJECT}),
                 400, "ValidationError", "name")
    assert_error(admin.post(W, {"project_id": ADMIN_PROJECT}), 400, "ValidationError",
                 "name", "required")
    assert_error(admin.post(W, {"name": "a", "project_id": ADMIN_PROJECT, "spec": {}}),
                 400, "ValidationError", "spec")
    assert_error(admin.post(W, [1, 2]), 400, "ValidationError", "object")


def test_validation_messages_never_echo_the_value(admin):
    secret = "s3cr3t-" + "v" * 70
    resp = admin.post(W, {"name": "a", "project_id": ADMIN_PROJECT, "secret_note": secret})
    assert_error(resp, 400, "ValidationError", "secret_note", "64")
    assert b"s3cr3t" not in resp.raw


def test_no_token_is_401_with_error_body(server):
    assert_error(server.client().get(W), 401, "Unauthorized")


# ---- the rest of section 2 ---------------------------------------------------------

def test_crud_cycle_with_and_without_trailing_slash(admin):
    created = admin.post(W + "/", {"name": "cycle", "project_id": ADMIN_PROJECT})
    assert created.status == 201
    item = f"{W}/{created.json['uuid']}"
    assert created.header("location") == item
    body = created.json
    for key in ("uuid", "created_at", "updated_at", "status", "project_id"):
        assert key in body
    assert body["created_at"].endswith("Z")
    assert admin.get(item + "/").json == admin.get(item).json
    updated = admin.put(item, {"color": "red"})
    assert updated.status == 200
    assert updated.json["color"] == "red" and updated.json["size"] == 10
    assert updated.json["updated_at"] > body["updated_at"]
    assert admin.delete(item).status == 204
    assert_error(admin.delete(item), 404, "NotFound")


def test_every_object_has_the_same_keys_and_omits_only_declared(admin):
    bare = new(admin)
    full = new(admin, color="blue", tags=["a"], secret_note="n", owner=None)
    assert "secret_note" not in bare and full["secret_note"] == "n"
    assert set(bare) | {"secret_note"} == set(full)
    assert bare["color"] is None and bare["tags"] is None


def test_client_supplied_uuid(admin):
    mine = str(uuid.uuid4())
    assert new(admin, uuid=mine.upper())["uuid"] == mine
    assert_error(admin.post(W, {"uuid": mine, "name": "other", "project_id": ADMIN_PROJECT}),
                 409, "Conflict")


def test_references_render_as_paths_and_accept_both_forms(admin):
    me = admin.get("/v1/iam/users", query={"username": "admin"}).json[0]["uuid"]
    by_path = new(admin, owner=f"/v1/iam/users/{me}")
    by_uuid = new(admin, owner=me)
    assert by_path["owner"] == by_uuid["owner"] == f"/v1/iam/users/{me}"
    assert by_path["project_id"] == f"/v1/iam/projects/{ADMIN_PROJECT}"
    listed = {w["uuid"] for w in admin.get(W, query={"owner": me}).json}
    assert {by_path["uuid"], by_uuid["uuid"]} <= listed


def test_filters_equality_any_of_booleans_and_lists(admin):
    tag = uuid.uuid4().hex[:8]
    red = new(admin, color="red", tags=[tag], enabled=False)
    green = new(admin, color="green", tags=[tag])
    new(admin, color="blue", tags=[tag])
    got = admin.get(W, query={"tags": tag, "color": ["red", "green"]}).json
    assert {w["uuid"] for w in got} == {red["uuid"], green["uuid"]}
    for spelling in ("false", "False", "FALSE"):
        got = admin.get(W, query={"tags": tag, "enabled": spelling}).json
        assert [w["uuid"] for w in got] == [red["uuid"]]


def test_sorting_and_projection(admin):
    tag = uuid.uuid4().hex[:8]
    for size in (5, 1, 9):
        new(admin, size=size, tags=[tag])
    asc = admin.get(W, query={"tags": tag, "sort_key": "size"}).json
    assert [w["size"] for w in asc] == [1, 5, 9]
    desc = admin.get(W, query={"tags": tag, "sort_key": "size", "sort_dir": "desc",
                               "fields": ["uuid", "size"]}).json
    assert [w["size"] for w in desc] == [9, 5, 1]
    assert all(set(w) == {"uuid", "size"} for w in desc)
    assert_error(admin.get(W, query={"sort_key": "nope"}), 400, "ValidationError")
    assert_error(admin.get(W, query={"sort_dir": "up"}), 400, "ValidationError")
    assert_error(admin.get(W, query={"fields": "nope"}), 400, "ValidationError")


def test_paging_headers_and_bad_paging(admin):
    tag = uuid.uuid4().hex[:8]
    made = [new(admin, tags=[tag])["uuid"] for _ in range(5)]
    first = admin.get(W, query={"tags": tag, "page_limit": 2})
    assert first.header("x-pagination-limit") == "2"
    assert first.header("x-pagination-marker") == made[1]
    last = admin.get(W, query={"tags": tag, "page_limit": 2, "page_marker": made[3]})
    assert [w["uuid"] for w in last.json] == made[4:]
    assert last.header("x-pagination-marker") is None
    assert_error(admin.get(W, query={"page_limit": 0}), 400, "ValidationError")
    assert_error(admin.get(W, query={"page_limit": "x"}), 400, "ValidationError")
    assert_error(admin.get(W, query={"page_limit": 2, "page_marker": str(uuid.uuid4())}),
                 400, "ValidationError")


def test_paging_walks_2500_records_while_records_are_added(admin, server):
    tag = "walk"
    base = [{"name": f"walk-{i:05d}", "project_id": ADMIN_PROJECT, "size": i % 100,
             "enabled": True, "tags": [tag], "status": "NEW"} for i in range(2500)]
    originals = [r["uuid"] for r in server.store.collection("test_widgets").insert_many(base)]
    stop = threading.Event()
    added = []

    def add_more():
        while not stop.is_set() and len(added) < 200:
            added.append(new(admin, tags=[tag])["uuid"])

    adder = threading.Thread(target=add_more)
    adder.start()
    seen, marker, pages = [], None, 0
    try:
        while True:
            query = {"tags": tag, "page_limit": 100}
            if marker:
                query["page_marker"] = marker
            resp = admin.get(W, query=query)
            assert resp.status == 200
            seen += [w["uuid"] for w in resp.json]
            pages += 1
            marker = resp.header("x-pagination-marker")
            if not marker:
                break
    finally:
        stop.set()
        adder.join()
    assert len(seen) == len(set(seen)), "a record came twice"
    # one batch shares its creation time, so the originals come in uuid order
    assert seen[:2500] == sorted(originals), "an original record was skipped or reordered"
    assert set(seen[2500:]) <= set(added)
    assert pages >= 25


def test_actions_post_and_get(admin):
    w = new(admin)
    resp = admin.post(f"{W}/{w['uuid']}/actions/echo/invoke", {"x": 1})
    assert resp.status == 200 and resp.json == {"widget": w["uuid"], "got": {"x": 1}}
    empty = admin.post(f"{W}/{w['uuid']}/actions/echo/invoke")
    assert empty.status == 200 and empty.json["got"] is None
    assert admin.get(f"{W}/{w['uuid']}/actions/peek").json == {"name": w["name"]}
    assert_error(admin.post(f"{W}/{uuid.uuid4()}/actions/echo/invoke", {}), 404, "NotFound")


def test_root_health_and_openapi_need_no_token(server):
    anon = server.client()
    root = anon.get("/")
    assert root.status == 200 and root.json["name"] == "appliance"
    assert "v1" in root.json["api_versions"]
    health = anon.get("/v1/health")
    assert health.status == 200 and health.json["status"] == "ok"


def test_openapi_document_is_valid_and_covers_every_route(server):
    doc = server.client().get("/v1/openapi.json").json
    validate(doc)        # openapi-spec-validator: raises on an invalid 3.1 document
    assert doc["openapi"].startswith("3.1")
    for route in server.api.routes:
        # <name> and <name:filter> (the console's <path:path>) are both {name}
        path = re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", route.path)
        assert route.method.lower() in doc["paths"][path], route
    widget = doc["components"]["schemas"]
    assert widget["WidgetCreate"]["properties"]["size"]["maximum"] == 100
    assert "status" not in widget["WidgetCreate"]["properties"]
    assert "serial" not in widget["WidgetUpdate"]["properties"]
    assert "status" in widget["Widget"]["properties"]
    # a write may answer 503 when a record kept changing under every retry; a read may not
    item = doc["paths"]["/v1/test/widgets/{uuid}"]
    assert "503" in item["put"]["responses"] and "503" in item["delete"]["responses"]
    assert "503" not in item["get"]["responses"]


def test_every_route_declares_a_permission(server):
    for route in server.api.routes:
        assert route.permission, route
        if route.public:
            # the marketplace's public catalog is the one public collection (spec 1);
            # enrollment is authenticated by its single-use token (docs/agent.md)
            assert route.path in ("/", "/v1/health", "/v1/openapi.json", "/v1/repo/store",
                                  "/v1/ua/enroll", "/v1/repo/store/elements",
                                  "/v1/repo/store/elements/<uuid>",
                                  # DBaaS's constant ["postgres"] (reference-api.md 9)
                                  "/v1/types", "/api/dbaas/v1/types",
                                  # the web console's files, login and logout
                                  # (docs/console.md; logout checks a live session itself)
                                  "/console", "/console/<path:path>",
                                  "/console/session") or \
                route.path.endswith("/actions/get_token/invoke"), route
        elif route.permission != AUTHENTICATED:     # the caller's own token or user
            for permission in route.permissions:
                parts = permission.split(".")
                assert len(parts) == 3 and all(parts), route


def test_registering_a_route_without_permission_fails(server):
    with pytest.raises(ValueError):
        server.api.route("GET", "/v1/test/unguarded", lambda call: {}, permission=None)


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_one_access_log_line_per_request(admin):
    mine = str(uuid.uuid4())
    access = logging.getLogger("appliance.access")
    handler, level = Lines(), access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        admin.get(f"{W}/{mine}", query={"name": "zzz"})
        admin.get(f"/v1/nothing/{mine}")
        # the line is written once the response is out: give the second one a moment
        deadline = time.monotonic() + 2
        while sum(mine in line for line in handler.lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    # each line is written after its response is out, on the request's own thread: on a
    # busy machine the second request's line can come first, so their order is not checked
    lines = sorted(line for line in handler.lines if mine in line)
    assert len(lines) == 2, handler.lines
    assert f'"GET /v1/nothing/{mine}" 404' in lines[0]
    assert f'"GET {W}/{mine}" 404' in lines[1]
    assert "zzz" not in " ".join(lines)      # query strings are not logged


def test_put_racing_another_writer_is_applied_to_the_fresh_record(admin, server):
    widgets = [r.resource for r in server.api.routes if r.path == W][0]
    w = new(admin)
    widgets.races_left = 2
    resp = admin.put(f"{W}/{w['uuid']}", {"tags": ["race"], "color": "red"})
    assert resp.status == 200, resp
    assert resp.json["color"] == "red" and resp.json["status"] == "ACTIVE"
    # contention that never ends cannot starve a PUT: its last attempt holds the lock
    widgets.races_left = 1000
    resp = admin.put(f"{W}/{w['uuid']}", {"tags": ["race"], "color": "green"})
    assert resp.status == 200, resp
    assert resp.json["color"] == "green"
    assert widgets.races_left == 1000 - (conflicts.ATTEMPTS - 1)
    widgets.races_left = 0


def test_an_action_that_never_wins_its_write_is_503_not_409(admin):
    w = new(admin)
    resp = admin.post(f"{W}/{w['uuid']}/actions/contend/invoke", {})
    # a 409 would blame the client for a conflict it did not cause
    assert_error(resp, 503, "ServiceUnavailable", "keeps changing")
    assert resp.header("retry-after") == "1"
    assert admin.get(f"{W}/{w['uuid']}").json["color"] is None


def test_a_server_answers_with_descriptors_past_1024(tmp_path):
    """select() cannot watch a descriptor >= 1024: servers must poll (seen as every later
    test server timing out once a long run had leaked descriptors)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1200:
        pytest.skip(f"the hard descriptor limit {hard} is below 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    pipes = []
    try:
        while not pipes or pipes[-1][1] < 1030:
            pipes.append(os.pipe())
        srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD).start()
        try:
            assert srv.client().get("/v1/health").status == 200
        finally:
            srv.stop()
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_stopped_test_server_releases_its_store_descriptors(tmp_path):
    before = len(os.listdir("/proc/self/fd"))
    for i in range(5):
        srv = ApiServer(str(tmp_path / f"s{i}"), ADMIN_PASSWORD).start()
        srv.stop()
    assert len(os.listdir("/proc/self/fd")) - before < 10


def test_public_routes_ignore_a_stale_token(server):
    """A client still sending an expired or revoked token can reach health and log in."""
    stale = server.client("not-a-valid-token")
    assert stale.get("/v1/health").status == 200
    resp = stale.post("/v1/iam/clients/default/actions/get_token/invoke", {
        "grant_type": "password", "username": "admin", "password": ADMIN_PASSWORD})
    assert resp.status == 200
    assert stale.get(W).status == 401
