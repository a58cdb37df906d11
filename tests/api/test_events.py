"""GET /v1/events (appliance/api/events.py): lifecycle events from the store's change
feed, each shown only to a caller that may read its resource; reconnecting with
Last-Event-ID misses nothing, across a real API restart too."""

import http.client
import json
import time

import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from state import Store
from tests.api import widgets
from tests.api.test_flood import ApiProcess
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import bind, make_project, make_user, role_uuid

HEARTBEAT = 0.5


def parse(raw):
    """[(id, event, data)] of an SSE body, and its comment lines."""
    events, comments = [], []
    for block in raw.decode().split("\n\n"):
        fields = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                comments.append(line[1:].strip())
            elif ":" in line:
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
        if "event" in fields:
            events.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events, comments


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    extra=widgets.register, events_heartbeat_seconds=HEARTBEAT,
                    feed_keep_entries=100).start()
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    for role, name in (("owner", "test.*.*"), ("reader", "test.*.read")):
        perm = admin.post("/v1/iam/permissions", {"name": name}).json["uuid"]
        admin.post("/v1/iam/permission_bindings", {"role": role_uuid(admin, role),
                                                   "permission": perm})
    a, b = make_project(admin, "events-a"), make_project(admin, "events-b")
    callers = {"admin": admin}
    for caller, role, project in (("owner_a", "owner", a), ("reader_a", "reader", a),
                                  ("owner_b", "owner", b)):
        user = make_user(admin, f"ev-{caller.replace('_', '-')}")
        bind(admin, user[0], role, project)
        callers[caller] = srv.client(srv.login(user[1], user[2], scope=f"project:{project}"))
    yield {"server": srv, "a": a, "b": b, **callers}
    srv.stop()


def events_since(client, since, **query):
    reply = client.get("/v1/events", query={"since": since, "follow": "false", **query})
    assert reply.status == 200, reply
    assert reply.header("Content-Type").startswith("text/event-stream")
    return parse(reply.raw)[0]


def lifecycle_since(client, since, **query):
    return [data for _, name, data in events_since(client, since, **query)
            if name == "lifecycle"]


def test_visibility_matrix(world):
    """(owner, reader, other project's owner, admin) x (own project's resource, the other
    project's, the platform's): a caller sees exactly what it may read."""
    admin = world["admin"]
    since = world["server"].store.feed.last()
    made = {}
    for where, project in (("a", world["a"]), ("b", world["b"]), ("platform", ADMIN_PROJECT)):
        reply = admin.post("/v1/test/widgets", {"name": f"m-{where}", "project_id": project})
        assert reply.status == 201, reply
        made[where] = reply.json["uuid"]
    expected = {"admin": {"a", "b", "platform"}, "owner_a": {"a"}, "reader_a": {"a"},
                "owner_b": {"b"}}
    for caller, sees in expected.items():
        shown = {e["uuid"] for e in lifecycle_since(world[caller], since, kind="test_widgets")}
        assert shown == {made[w] for w in sees}, caller
        # and no other kind's event of another project either
        for event in lifecycle_since(world[caller], since):
            if caller != "admin":
                assert event["project_id"] in (world[caller.split("_")[1]], None), caller


def test_an_event_says_what_happened_who_did_it_and_which_request(world):
    admin, owner = world["admin"], world["owner_a"]
    since = world["server"].store.feed.last()
    created = owner.post("/v1/test/widgets", {"name": "told", "project_id": world["a"]})
    assert created.status == 201
    uuid = created.json["uuid"]
    assert owner.put(f"/v1/test/widgets/{uuid}", {"size": 5}).status == 200
    world["server"].store.collection("test_widgets").update(uuid, {"status": "ACTIVE"})
    assert admin.delete(f"/v1/test/widgets/{uuid}").status == 204
    events = [e for e in lifecycle_since(owner, since) if e["uuid"] == uuid]
    types = [e["type"] for e in events]
    assert types[0] == "created" and types[1] == "updated" and types[-1] == "deleted"
    assert "status_changed" in types
    first = events[0]
    assert first["kind"] == "test_widgets" and first["name"] == "told"
    assert first["project_id"] == world["a"] and first["path"] == f"/v1/test/widgets/{uuid}"
    assert first["actor"]["type"] == "user" and first["actor"]["name"] == "ev-owner-a"
    assert first["request_id"] == created.header("X-Request-Id")
    assert first["timestamp"].endswith("Z")
    changed = next(e for e in events if e["type"] == "status_changed")
    assert (changed["old_status"], changed["status"]) == ("NEW", "ACTIVE")
    assert changed["actor"]["type"] == "platform"       # written by no request
    assert events[-1]["actor"]["name"] == "admin"
    revisions = [e["revision"] for e in events]
    assert revisions == sorted(revisions)


def test_an_invoked_action_is_its_own_event(world):
    owner = world["owner_a"]
    uuid = owner.post("/v1/test/widgets", {"name": "acted", "project_id": world["a"]}
                      ).json["uuid"]
    since = world["server"].store.feed.last()
    reply = owner.post(f"/v1/test/widgets/{uuid}/actions/activate/invoke", {})
    assert reply.status == 200, reply
    (event,) = [e for e in lifecycle_since(owner, since) if e["uuid"] == uuid]
    assert event["type"] == "action_invoked" and event["action"] == "activate"
    assert (event["old_status"], event["status"]) == ("NEW", "ACTIVE")
    assert event["request_id"] == reply.header("X-Request-Id")
    assert event["actor"]["name"] == "ev-owner-a"


def test_filters(world):
    admin = world["admin"]
    since = world["server"].store.feed.last()
    in_a = admin.post("/v1/test/widgets", {"name": "f-a", "project_id": world["a"]}).json
    in_b = admin.post("/v1/test/widgets", {"name": "f-b", "project_id": world["b"]}).json
    project = {e["uuid"] for e in lifecycle_since(admin, since, project_id=world["b"])}
    assert project == {in_b["uuid"]}
    one = {e["uuid"] for e in lifecycle_since(admin, since, uuid=in_a["uuid"])}
    assert one == {in_a["uuid"]}
    kinds = {e["kind"] for e in lifecycle_since(admin, since, kind="iam_projects")}
    assert kinds <= {"iam_projects"}
    # since a time: the first of the two and what follows
    at = lifecycle_since(admin, since)[0]["timestamp"]
    assert in_a["uuid"] in {e["uuid"] for e in lifecycle_since(admin, at)}


@pytest.mark.parametrize("query,status", [
    ({"kind": "no_such_kind"}, 400), ({"since": "yesterday"}, 400),
    ({"since": "2026-01-01T00:00:00"}, 400), ({"follow": "maybe"}, 400)])
def test_bad_filters_are_refused(world, query, status):
    reply = world["admin"].get("/v1/events", query=query)
    assert reply.status == status
    assert reply.json["code"] == 400 and reply.json["message"]


def test_filtering_by_another_project_is_forbidden(world):
    reply = world["owner_a"].get("/v1/events", query={"project_id": world["b"],
                                                      "follow": "false"})
    assert reply.status == 403 and reply.json["code"] == 403


def test_a_client_that_does_not_ask_for_a_stream_gets_what_is_there(world):
    """Without Accept: text/event-stream nor follow=true (curl, a script, a fuzzer) the
    answer ends: nobody is left reading a body that never ends by surprise."""
    reply = world["admin"].get("/v1/events")
    assert reply.status == 200
    assert reply.raw.rstrip().endswith(f"end {world['server'].store.feed.last()}".encode())


def test_no_token_no_events(world):
    reply = world["server"].client().get("/v1/events")
    assert reply.status == 401


def open_stream(srv, token, headers=None, query=""):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("GET", "/v1/events" + query,
                 headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream",
                          **(headers or {})})
    return conn, conn.getresponse()


def read_until(resp, predicate, timeout=20):
    """Read SSE lines until predicate(text so far) holds."""
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = resp.fp.readline()
        if not line:
            break
        seen += line
        if predicate(seen.decode(errors="replace")):
            return seen.decode()
    raise AssertionError(f"not seen in time: {seen[-500:]!r}")


def test_a_following_stream_gets_new_events_and_heartbeats(world):
    srv, admin = world["server"], world["admin"]
    conn, resp = open_stream(srv, admin.token)
    try:
        assert resp.status == 200
        read_until(resp, lambda text: "retry:" in text)
        made = admin.post("/v1/test/widgets", {"name": "live", "project_id": world["a"]}).json
        text = read_until(resp, lambda text: made["uuid"] in text)
        assert "event: lifecycle" in text
        assert ": heartbeat" in read_until(resp, lambda text: ": heartbeat" in text)
    finally:
        resp.close()
        conn.close()


def test_streams_over_the_cap_get_503_with_retry_after(world):
    srv, admin = world["server"], world["admin"]
    # wait for the streams of earlier tests to be seen closed (at their next heartbeat)
    deadline = time.monotonic() + 10
    while srv.api.events.open and time.monotonic() < deadline:
        time.sleep(0.1)
    limit = srv.api.events.limit
    assert limit >= 1
    held = [open_stream(srv, admin.token) for _ in range(limit)]
    try:
        assert all(resp.status == 200 for _, resp in held)
        over = admin.get("/v1/events", headers={"Accept": "text/event-stream"})
        assert over.status == 503
        assert over.json == {"type": "ServiceUnavailable", "code": 503,
                             "message": over.json["message"]}
        assert "events_max_streams" in over.json["message"]
        assert over.header("Retry-After") == "5"
        # ordinary requests still answer
        assert admin.get("/v1/test/widgets").status == 200
    finally:
        for conn, resp in held:
            resp.close()
            conn.close()
    deadline = time.monotonic() + 10
    while srv.api.events.open and time.monotonic() < deadline:
        time.sleep(0.1)
    assert srv.api.events.open == 0
    assert admin.get("/v1/events", query={"follow": "false"}).status == 200


def test_a_revision_out_of_the_window_is_told_to_resync(world):
    srv, admin = world["server"], world["admin"]
    widgets_coll = srv.store.collection("test_widgets")
    for i in range(150):                # feed_keep_entries is 100 here
        widgets_coll.insert({"name": f"fill-{i}", "project_id": world["a"]})
    events = events_since(admin, 1)
    first_id, name, data = events[0]
    assert name == "resync"
    assert data["asked"] == 1 and data["revision"] == first_id == srv.store.feed.last()


def test_last_event_id_misses_nothing_across_a_real_api_restart(tmp_path):
    """The feed is on disk: a client that reconnects to a new API process with the last
    id it saw gets every event since, the writes made while no API ran included."""
    api = ApiProcess(tmp_path)
    try:
        token = api.login()
        status, raw = api.get("/v1/events?follow=false", token=token)
        assert status == 200
        last_seen = parse(raw)[0][-1][0]
        store = Store(api.settings["state_dir"])
        store.collection("iam_organizations").insert({"name": "while-up"})
    finally:
        api.stop()
    # written while no API runs: a daemon's write, say
    store.collection("iam_organizations").insert({"name": "while-down"})
    store.close()
    api = ApiProcess(tmp_path)
    try:
        token = api.login()
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
        conn.request("GET", "/v1/events?follow=false", headers={
            "Authorization": f"Bearer {token}", "Last-Event-ID": str(last_seen)})
        resp = conn.getresponse()
        events, _ = parse(resp.read())
        conn.close()
    finally:
        api.stop()
    ids = [i for i, _, _ in events]
    assert ids[0] == last_seen + 1 and ids == list(range(last_seen + 1, ids[-1] + 1))
    names = [d["name"] for _, n, d in events if d.get("kind") == "iam_organizations"]
    assert names == ["while-up", "while-down"]


def test_stopping_the_api_ends_a_stream_cleanly(tmp_path):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD).start()
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    conn, resp = open_stream(srv, admin.token)
    read_until(resp, lambda text: "retry:" in text)
    srv.api.close()         # what ApiServer.stop does first
    text = read_until(resp, lambda text: "Last-Event-ID" in text)
    assert "event: end" in text and "reconnect with Last-Event-ID" in text
    resp.close()
    conn.close()
    srv.stop()


def test_a_real_api_stopped_with_sigterm_ends_its_streams_cleanly(tmp_path):
    import signal
    api = ApiProcess(tmp_path)
    try:
        token = api.login()
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
        conn.request("GET", "/v1/events?follow=true",
                     headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        assert resp.status == 200
        read_until(resp, lambda text: "retry:" in text)
        api.proc.send_signal(signal.SIGTERM)
        text = read_until(resp, lambda text: "Last-Event-ID" in text)
        assert "event: end" in text
        assert api.proc.wait(timeout=30) == 0
        resp.close()
        conn.close()
    finally:
        api.stop()
