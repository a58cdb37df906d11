"""Who reads the trail: the matrix (admin, owner of A, reader of A, owner of B) x (entries
of A, of B, of the platform), and the refusals around it."""

import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from tests.audit.conftest import entries
from tests.iam.helpers import bind, make_project, make_user


@pytest.fixture(scope="module")
def world(server, admin):
    a, b = make_project(admin), make_project(admin)
    callers = {"admin": admin}
    for name, role, project in (("owner_a", "owner", a), ("reader_a", "reader", a),
                                ("owner_b", "owner", b)):
        user, username, password = make_user(admin)
        bind(admin, user, role, project)
        callers[name] = server.client(server.login(username, password, f"project:{project}"))
        callers[name + "_unscoped"] = server.client(server.login(username, password))
    written = {}
    for key, client, project in (("a", callers["owner_a"], a), ("b", callers["owner_b"], b),
                                 ("platform", admin, ADMIN_PROJECT)):
        resp = client.post("/v1/secret/secrets/", {"name": f"matrix-{key}",
                                                   "project_id": project, "value": "v-1"})
        assert resp.status == 201, resp
        written[key] = resp.header("X-Request-Id")
    # an entry with no project at all (a platform call): the platform's too
    resp = admin.post("/v1/iam/organizations/", {"name": "matrix-org"})
    assert resp.status == 201, resp
    written["no project"] = resp.header("X-Request-Id")
    return callers, {"a": a, "b": b}, written


# caller -> which of the entries it reads (None: refused with 403)
MATRIX = {
    "admin": {"a", "b", "platform", "no project"},
    "owner_a": {"a"},
    "reader_a": None,
    "owner_b": {"b"},
    # bound in a project only: an unscoped token carries none of the project's rights
    "owner_a_unscoped": None,
}


@pytest.mark.parametrize("caller", sorted(MATRIX))
def test_who_reads_which_entries(world, caller):
    callers, _, written = world
    resp = callers[caller].get("/v1/audit/")
    if MATRIX[caller] is None:
        assert resp.status == 403 and resp.json["type"] == "Forbidden", resp
        return
    assert resp.status == 200, resp
    seen = {e["request_id"] for e in resp.json}
    assert {k for k, rid in written.items() if rid in seen} == MATRIX[caller]


def test_an_owner_filtering_by_another_project_is_refused(world):
    callers, projects, _ = world
    for other in (projects["b"], ADMIN_PROJECT):
        resp = callers["owner_a"].get("/v1/audit/", query={"project_id": other})
        assert resp.status == 403 and "project" in resp.json["message"], resp
    own = entries(callers["owner_a"], project_id=projects["a"])
    assert own and {e["project_id"] for e in own} == {projects["a"]}


def test_the_owner_reads_its_own_actions_and_the_admins_in_its_project(world, admin):
    callers, projects, _ = world
    resp = admin.post("/v1/secret/secrets/", {"name": "by-admin-in-a",
                                              "project_id": projects["a"], "value": "v"})
    assert resp.status == 201
    seen = {e["request_id"]: e for e in entries(callers["owner_a"])}
    entry = seen[resp.header("X-Request-Id")]
    assert entry["actor"]["name"] == "admin" and entry["project_id"] == projects["a"]


def test_no_token_is_401(server):
    assert server.client().get("/v1/audit/").status == 401


def test_the_route_is_in_the_openapi_document_with_its_permission(admin):
    document = admin.get("/v1/openapi.json").json
    operation = document["paths"]["/v1/audit"]["get"]
    assert operation["x-permission"] == "audit.entry.read"
    assert {p["name"] for p in operation["parameters"]} >= {
        "actor", "project_id", "kind", "since", "until", "page_limit", "page_marker"}
