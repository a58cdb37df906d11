"""An item GET answered again by the event loop from a kept answer (appliance/api/answers.py,
issue 32): the same answer as the ordinary path, and every change that decides it seen by
the very next request. Each test GETs twice first, so that the second answer is the
loop's (the test server installs the same `answers.install` as appliance/server.py; the
replays are counted by wrapping `Answers.replaying`), then changes one thing and expects
the next GET to see it."""

import time

import jwt
import pytest

from state import Store
from tests.iam.helpers import bind, make_project, make_user

W = "/v1/test/widgets"
USERS = "/v1/iam/users"
LOGOUT = "/v1/iam/clients/default/actions/logout/invoke"


@pytest.fixture
def replays(server, monkeypatch):
    """The entries the loop thread answered, in order."""
    answers = server.api.answers
    seen = []
    replaying = answers.replaying

    def counting(entry):
        if entry is not None:
            seen.append(entry)
        replaying(entry)
    monkeypatch.setattr(answers, "replaying", counting)
    return seen


def kept(client, path, replays):
    """GET `path` twice; the second is the loop's. Returns the answer."""
    first = client.get(path)
    before = len(replays)
    second = client.get(path)
    assert second.status == first.status == 200, second
    assert len(replays) == before + 1, "the second GET was not answered by the loop"
    assert second.raw == first.raw
    return second


def user_client(server, admin, role="admin", project=None):
    uuid, name, password = make_user(admin)
    bind(admin, uuid, role, project)
    token = server.login(name, password, scope=f"project:{project}" if project else "")
    return server.client(token), uuid, token


def test_the_loops_answer_is_the_ordinary_one_byte_for_byte(server, admin, replays):
    uuid = admin.post(W, {"name": "same-answer", "project_id": make_project(admin)}).json["uuid"]
    first = admin.get(f"{W}/{uuid}")
    second = kept(admin, f"{W}/{uuid}", replays)
    assert second.headers.keys() == first.headers.keys()
    for name in first.headers:
        if name not in ("x-request-id", "date"):
            assert second.headers[name] == first.headers[name], name
    # each request its own id
    assert second.headers["x-request-id"] != first.headers["x-request-id"]


def test_an_update_a_delete_and_another_processs_write_are_seen_at_once(
        server, admin, replays):
    uuid = admin.post(W, {"name": "changing", "project_id": make_project(admin)}).json["uuid"]
    path = f"{W}/{uuid}"
    kept(admin, path, replays)
    assert admin.put(path, {"size": 42}).status == 200
    assert admin.get(path).json["size"] == 42
    kept(admin, path, replays)
    other = Store(server.settings["state_dir"])     # another writer of the same files
    try:
        other.collection("test_widgets").update(uuid, {"color": "blue"})
    finally:
        other.close()
    assert admin.get(path).json["color"] == "blue"
    kept(admin, path, replays)
    assert admin.delete(path).status == 204
    assert admin.get(path).status == 404
    assert admin.get(path).status == 404


def test_a_query_a_cookie_and_a_trailing_slash_are_not_mixed_up(server, admin, replays):
    uuid = admin.post(W, {"name": "views", "project_id": make_project(admin)}).json["uuid"]
    path = f"{W}/{uuid}"
    whole = kept(admin, path, replays).json
    count = len(replays)
    only = admin.get(path, query={"fields": "uuid"})
    assert only.status == 200 and only.json == {"uuid": uuid}
    assert admin.get(path, query={"fields": "uuid"}).json == {"uuid": uuid}
    assert len(replays) == count                    # a query is never the loop's
    assert admin.get(path).json == whole
    assert kept(admin, path + "/", replays).json == whole


def test_tenants_views_are_never_mixed(server, admin, replays):
    project_a, project_b = make_project(admin), make_project(admin)
    alice, _, _ = user_client(server, admin, project=project_a)
    bob, _, _ = user_client(server, admin, project=project_b)
    of_a = admin.post(W, {"name": "of-a", "project_id": project_a}).json["uuid"]
    kept(alice, f"{W}/{of_a}", replays)
    kept(admin, f"{W}/{of_a}", replays)
    count = len(replays)
    # another project's token never gets the kept answer, however often it asks
    for _ in range(3):
        resp = bob.get(f"{W}/{of_a}")
        assert resp.status == 404 and resp.json["type"] == "NotFound"
    assert len(replays) == count
    assert alice.get(f"{W}/{of_a}").status == 200


def test_logout_and_a_revocation_by_another_process_are_seen_at_once(server, admin, replays):
    client, uuid, token = user_client(server, admin)
    kept(client, f"{USERS}/{uuid}", replays)
    assert client.post(LOGOUT).status == 204
    resp = client.get(f"{USERS}/{uuid}")
    assert resp.status == 401 and resp.json["message"] == "token revoked"

    client, uuid, token = user_client(server, admin)
    kept(client, f"{USERS}/{uuid}", replays)
    claims = jwt.decode(token, options={"verify_signature": False})
    other = Store(server.settings["state_dir"])
    try:
        other.collection("iam_revoked_sessions").insert(
            {"sid": claims["sid"], "user": uuid, "expires_at": "2999-01-01T00:00:00Z"})
    finally:
        other.close()
    resp = client.get(f"{USERS}/{uuid}")
    assert resp.status == 401 and resp.json["message"] == "token revoked"


def test_a_role_binding_deleted_a_user_disabled_or_deleted_are_seen_at_once(
        server, admin, replays):
    client, uuid, _ = user_client(server, admin)
    kept(client, f"{USERS}/{uuid}", replays)
    binding = admin.get("/v1/iam/role_bindings", query={"user": uuid}).json[0]["uuid"]
    assert admin.delete(f"/v1/iam/role_bindings/{binding}").status == 204
    assert client.get(f"{USERS}/{uuid}").status == 403

    client, uuid, _ = user_client(server, admin)
    kept(client, f"{USERS}/{uuid}", replays)
    assert admin.put(f"{USERS}/{uuid}", {"status": "DISABLED"}).status == 200
    assert client.get(f"{USERS}/{uuid}").status == 401

    client, uuid, _ = user_client(server, admin)
    kept(client, f"{USERS}/{uuid}", replays)
    assert admin.delete(f"{USERS}/{uuid}").status == 204
    assert client.get(f"{USERS}/{uuid}").status == 401


def test_a_deleted_project_voids_its_tokens_answers(server, admin, replays):
    project = make_project(admin)
    client, _, _ = user_client(server, admin, project=project)
    widget = admin.post(W, {"name": "in-project", "project_id": project}).json["uuid"]
    kept(client, f"{W}/{widget}", replays)
    # by another process, past the API's in-use check (its role binding): only the
    # project's own kind changes
    other = Store(server.settings["state_dir"])
    try:
        other.collection("iam_projects").delete(project)
    finally:
        other.close()
    resp = client.get(f"{W}/{widget}")
    assert resp.status == 401 and "no longer exists" in resp.json["message"]


def test_an_expired_token_is_refused_as_before(server, admin, replays):
    uuid, name, password = make_user(admin)
    bind(admin, uuid, "admin")
    resp = server.client().post("/v1/iam/clients/default/actions/get_token/invoke", {
        "grant_type": "password", "username": name, "password": password, "ttl": 2})
    client = server.client(resp.json["access_token"])
    kept(client, f"{USERS}/{uuid}", replays)
    expires = jwt.decode(resp.json["access_token"], options={"verify_signature": False})["exp"]
    time.sleep(max(0.0, expires - time.time()) + 0.2)
    resp = client.get(f"{USERS}/{uuid}")
    assert resp.status == 401 and resp.json["message"] == "token expired"


def test_every_answer_has_its_access_line_and_is_counted(server, admin, replays, caplog):
    uuid = admin.post(W, {"name": "logged", "project_id": make_project(admin)}).json["uuid"]
    path = f"{W}/{uuid}"
    kept(admin, path, replays)
    counted = served(admin)
    count = len(replays)
    ids = []
    with caplog.at_level("INFO", logger="appliance.access"):
        for _ in range(3):
            resp = admin.get(path)
            assert resp.status == 200
            ids.append(resp.headers["x-request-id"])
        # a line may be written a moment after its answer has left (as on a worker)
        deadline = time.monotonic() + 10
        while not all(logged_line(caplog, path, i) for i in ids) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
    for request_id in ids:
        assert logged_line(caplog, path, request_id), request_id
    assert len(replays) == count + 3
    assert served(admin) >= counted + 3


def logged_line(caplog, path, request_id):
    return any(r.name == "appliance.access" and f'"GET {path}" 200' in r.getMessage()
               and r.getMessage().endswith(request_id) for r in list(caplog.records))


def served(admin):
    """appliance_api_requests_total of the widgets' item GET answered 200."""
    text = admin.get("/metrics").raw.decode()
    for line in text.splitlines():
        if line.startswith("appliance_api_requests_total{") and \
                'route="/v1/test/widgets/<uuid>"' in line and 'method="GET"' in line \
                and 'status="200"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
