"""Deny by default on every route, and project scoping (spec 5.5)."""

import re
import uuid as uuidlib

import pytest

from appliance import metrics
from appliance.api.routing import AUTHENTICATED
from appliance.iam.builtin import ADMIN_PROJECT
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

from tests.api import widgets

from .helpers import bind, make_project, make_user, role_uuid

PARAM = re.compile(r"<([a-z_]+)>")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Admin, a newcomer, an owner of project A (token scoped to A), project B's items."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    extra=widgets.register).start()
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    # the owner role also covers the test service, so that scoping (not a missing
    # permission) is what stops an owner of A on B's widgets
    perm = admin.post("/v1/iam/permissions", {"name": "test.*.*"}).json["uuid"]
    admin.post("/v1/iam/permission_bindings", {"role": role_uuid(admin, "owner"),
                                               "permission": perm})
    project_a, project_b = make_project(admin, "alpha"), make_project(admin, "beta")
    newcomer = make_user(admin, "newcomer-user")
    bind(admin, newcomer[0], "newcomer")
    owner = make_user(admin, "owner-of-a")
    bind(admin, owner[0], "owner", project_a)
    world = {
        "server": srv, "admin": admin, "a": project_a, "b": project_b,
        "newcomer": srv.client(srv.login(newcomer[1], newcomer[2])),
        "owner_a": srv.client(srv.login(owner[1], owner[2], scope=f"project:{project_a}")),
        "owner_unscoped": srv.client(srv.login(owner[1], owner[2])),
    }
    yield world
    srv.stop()


def item_in_project_b(world, route):
    """A real record of the route's kind that belongs to project B (or any record of a
    kind that has no project)."""
    resource = route.resource
    if resource is None:
        return str(uuidlib.uuid4())
    coll = resource.collection()
    if not hasattr(coll, "insert"):
        return str(uuidlib.uuid4())     # a read-only view (em/parts.py): nothing to plant
    if resource.project_scoped:
        # a fresh value in every unique field (an artifact's element and urn), so that
        # each planted record is new
        planted = {f: f"b-{uuidlib.uuid4().hex[:8]}" for key in resource.unique for f in key}
        return coll.insert({**planted, "project_id": world["b"]})["uuid"]
    existing = coll.records()
    return existing[0]["uuid"] if existing else coll.insert({})["uuid"]


def concrete(world, route):
    def fill(match):
        if match.group(1) == "client":
            return "default"
        return item_in_project_b(world, route)
    return PARAM.sub(fill, route.path)


def guarded_routes(world):
    return [r for r in world["server"].api.routes if not r.public]


def self_service(route):
    """A route on the caller's own token: any valid token may use it (tested below)."""
    return route.permission == AUTHENTICATED and route.resource is None


def call(client, route, path, body):
    if route.method in ("POST", "PUT"):
        return client.request(route.method, path, body)
    return client.request(route.method, path)


def test_matrix_covers_the_route_table(world):
    routes = guarded_routes(world)
    assert len(routes) >= 40
    assert {r.path for r in world["server"].api.routes if r.public} == {
        "/", "/v1/health", "/v1/openapi.json",
        "/v1/iam/clients/<client>/actions/get_token/invoke",
        # the marketplace's public catalog (spec 1), read by the reference CLI without a
        # token: the admin project's elements only (tests/repo/test_store.py)
        "/v1/repo/store", "/v1/repo/store/elements", "/v1/repo/store/elements/<uuid>",
        # a node agent's enrollment: the single-use token is the authentication
        "/v1/ua/enroll",
        # DBaaS's constant list of database types, ["postgres"] (reference-api.md 9)
        "/v1/types", "/api/dbaas/v1/types",
        # the web console's files, its login (the password is the authentication) and
        # its logout (clears the cookies even of a dead session; a live one is checked,
        # CSRF included, by the authenticator: tests/console/test_session.py)
        "/console", "/console/<path:path>", "/console/session"}


def test_every_guarded_route_without_token_is_401(world):
    anon = world["server"].client()
    for route in guarded_routes(world):
        if route.path == metrics.PATH:
            # the one exception: a caller on this machine straight to the API's socket, as
            # this client is (a local Prometheus). Through a proxy, or from elsewhere, it
            # needs a token: tests/api/test_metrics.py, with the API's own Waitress settings
            resp = anon.get(route.path)
            assert resp.status == 200 and resp.header("content-type").startswith(
                "text/plain"), (route, resp)
            continue
        resp = call(anon, route, concrete(world, route), {"project_id": world["b"]})
        assert resp.status == 401, (route, resp)
        assert resp.json["type"] == "Unauthorized"


def test_every_guarded_route_for_an_unbound_user_is_403(world):
    for route in guarded_routes(world):
        if self_service(route):
            continue        # a logout here would end the newcomer's token
        resp = call(world["newcomer"], route, concrete(world, route),
                    {"project_id": world["b"]})
        assert resp.status == 403, (route, resp)


def test_every_guarded_route_scoped_to_a_on_b_never_succeeds(world):
    for route in guarded_routes(world):
        if self_service(route):
            continue        # the caller's own token, no project's item (tested below)
        path = concrete(world, route)
        resp = call(world["owner_a"], route, path, {"project_id": world["b"], "name": "x"})
        # the audit trail is a listing of project-scoped entries too (docs/audit.md)
        if route.method == "GET" and "<" not in route.path and (
                route.resource is not None and route.resource.project_scoped
                or route.path == "/v1/audit"):
            # a collection: B's items must not be listed, and filtering by B is 403
            assert resp.status == 200
            # the spec's one list in an object: /v1/types/sqldb/versions (spec 4.4)
            items = resp.json["versions"] if isinstance(resp.json, dict) else resp.json
            assert all(i.get("project_id", "").endswith(world["a"]) or
                       i.get("project_id", "").endswith(ADMIN_PROJECT) for i in items)
            resp = world["owner_a"].get(path, query={"project_id": world["b"]})
        assert resp.status in (403, 404), (route, resp)


def test_self_service_routes_touch_only_the_callers_token(world):
    routes = [r for r in guarded_routes(world) if self_service(r)]
    # the one such route that is not about the caller's token: the event stream, open to
    # any token, which shows each event only by its resource's own read rule
    # (tests/api/test_events.py holds that matrix); and the web console's session (GET
    # describes the caller's own session, PUT moves it to one of the caller's projects:
    # tests/console/test_session.py)
    assert sorted(r.path for r in routes if "/actions/" not in r.path) == [
        "/console/session", "/console/session", "/v1/events"]
    routes = [r for r in routes if "/actions/" in r.path]
    assert sorted(r.path.rsplit("/actions/", 1)[1] for r in routes) == [
        "introspect", "logout/invoke", "me"]
    # every other route open to any token is an action on one record that checks the
    # caller itself (change_password: one's own, or with the permission; quotas: one's
    # own project, or a platform caller with iam.project.read)
    assert sorted(r.path for r in guarded_routes(world)
                  if r.permission == AUTHENTICATED and not self_service(r)) == [
        "/v1/iam/projects/<uuid>/actions/quotas",
        "/v1/iam/users/<uuid>/actions/change_password/invoke"]
    seen = world["owner_a"].get("/v1/iam/clients/default/actions/introspect").json
    assert seen["project_id"] == world["a"]
    assert seen["user_info"]["username"] == "owner-of-a"


def test_newcomer_sees_nothing_until_bound_then_only_its_project(world):
    admin, srv = world["admin"], world["server"]
    uuid, name, password = make_user(admin)
    intro = "/v1/iam/clients/default/actions/introspect"
    plain = srv.client(srv.login(name, password))
    assert plain.get(intro).json["permissions"] == []
    assert plain.get("/v1/iam/projects").status == 403
    project = make_project(admin)
    bind(admin, uuid, "owner", project)
    scoped = srv.client(srv.login(name, password, scope=f"project:{project}"))
    seen = scoped.get(intro).json
    assert seen["project_id"] == project
    assert "repo.repository.upload" in seen["permissions"]
    # the binding to the project opens that project only
    token_elsewhere = srv.token_response(name, password, scope=f"project:{world['b']}")
    assert token_elsewhere.status == 400
    # and grants no IAM administration
    assert scoped.get("/v1/iam/users").status == 403
    assert plain.get(intro).json["permissions"] == []   # unscoped: global bindings only


def test_unscoped_admin_reads_and_writes_everything(world):
    admin = world["admin"]
    assert admin.get("/v1/iam/users").status == 200
    assert admin.get("/v1/iam/role_bindings").status == 200


def test_scoped_owner_works_in_its_own_project_only(world):
    owner, admin = world["owner_a"], world["admin"]
    W = "/v1/test/widgets"
    mine = owner.post(W, {"name": "mine"})        # project_id defaults to the token's
    assert mine.status == 201, mine
    assert mine.json["project_id"].endswith(world["a"])
    theirs = admin.post(W, {"name": "theirs", "project_id": world["b"]}).json
    assert owner.get(f"{W}/{mine.json['uuid']}").status == 200
    assert owner.put(f"{W}/{mine.json['uuid']}", {"color": "red"}).status == 200
    assert owner.get(f"{W}/{theirs['uuid']}").status == 404
    assert owner.put(f"{W}/{theirs['uuid']}", {"color": "red"}).status == 404
    assert owner.delete(f"{W}/{theirs['uuid']}").status == 404
    assert owner.post(W, {"name": "intruder", "project_id": world["b"]}).status == 403
    listed = {w["uuid"] for w in owner.get(W).json}
    assert mine.json["uuid"] in listed and theirs["uuid"] not in listed
    assert owner.get(W, query={"project_id": world["a"]}).status == 200
    assert owner.get(W, query={"project_id": world["b"]}).status == 403
    # an unscoped token of the same user carries only global bindings: nothing
    assert world["owner_unscoped"].get(W).status == 403
    # the admin, unscoped with *.*.*, reads and writes both
    assert admin.get(f"{W}/{mine.json['uuid']}").status == 200
    assert admin.put(f"{W}/{theirs['uuid']}", {"color": "blue"}).status == 200
