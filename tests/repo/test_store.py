"""The marketplace as the reference serves it: /v1/repo/store/ (public catalog, latest
stable versions) and the artifacts of repo elements, over real repositories synced by the
real builder (a directory, and a real nginx for artifacts)."""

import pytest

from tests.iam.helpers import bind, make_project, make_user
from tests.nginx import Nginx, require_nginx, static_site

from .conftest import (ADMIN_PROJECT, E, R, elements_of, make_repo, manifest, wait_repo,
                       write_manifest)
from .test_nginx_e2e import publish

S = "/v1/repo/store"
A = "/v1/repo/artifacts"


def assert_error(resp, status, type_, *words):
    assert resp.status == status, resp
    assert set(resp.json) == {"type", "code", "message"} and resp.json["code"] == status
    assert resp.json["type"] == type_
    for word in words:
        assert word in resp.json["message"], resp.json["message"]


def bootstrap_repo(admin, directory, project, published, **fields):
    directory.mkdir()
    for name, version in published:
        write_manifest(directory, manifest(name, version))
    repo = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(directory)},
                     project_id=project, **fields)
    wait_repo(admin, repo["uuid"])
    return repo


@pytest.fixture(scope="module")
def world(server, admin, tmp_path_factory):
    """Shared catalog: alpha 1.0.0, 1.2.0, 1.3.0-dev.1 and beta 2.0.0 (twice: in a
    preferred repository too); project A: alpha 2.0.0, gamma 1.0.0-rc.1 and 1.0.0;
    project B: delta 1.0.0."""
    base = tmp_path_factory.mktemp("store")
    project_a, project_b = make_project(admin), make_project(admin)
    shared = bootstrap_repo(admin, base / "shared", ADMIN_PROJECT, [
        ("alpha", "1.0.0"), ("alpha", "1.2.0"), ("alpha", "1.3.0-dev.1"), ("beta", "2.0.0")])
    preferred = bootstrap_repo(admin, base / "preferred", ADMIN_PROJECT,
                               [("beta", "2.0.0")], priority=9000)
    own = bootstrap_repo(admin, base / "a", project_a, [
        ("alpha", "2.0.0"), ("gamma", "1.0.0-rc.1"), ("gamma", "1.0.0")])
    bootstrap_repo(admin, base / "b", project_b, [("delta", "1.0.0")])

    def user_of(role, project):
        uid, name, password = make_user(admin)
        bind(admin, uid, role, project)
        return server.client(server.login(name, password, scope=f"project:{project}"))

    newcomer_id, name, password = make_user(admin)
    bind(admin, newcomer_id, "newcomer")
    return {"a": project_a, "b": project_b, "shared": shared, "preferred": preferred,
            "own": own, "owner_a": user_of("owner", project_a),
            "reader_a": user_of("reader", project_a),
            "newcomer": server.client(server.login(name, password)),
            "anonymous": server.client()}


def pairs(listing):
    return sorted((e["name"], e["version"]) for e in listing)


# ---- the index --------------------------------------------------------------------

def test_index_names_both_catalogs_for_anyone(world):
    anonymous = world["anonymous"]
    for path in (S, S + "/"):
        resp = anonymous.get(path)
        assert resp.status == 200, resp
        assert resp.json == {"elements": f"{S}/elements",
                             "latest_stable_elements": f"{S}/latest_stable_elements"}
    assert anonymous.get(resp.json["elements"]).status == 200
    assert_error(anonymous.post(S, {}), 405, "MethodNotAllowed")


# ---- the public catalog -----------------------------------------------------------

def test_public_catalog_is_the_admin_projects_without_a_token(world, admin):
    anonymous = world["anonymous"]
    resp = anonymous.get(f"{S}/elements")
    assert resp.status == 200, resp
    assert pairs(resp.json) == [("alpha", "1.0.0"), ("alpha", "1.2.0"),
                                ("alpha", "1.3.0-dev.1"), ("beta", "2.0.0"),
                                ("beta", "2.0.0")]
    assert all(e["project_id"] == ADMIN_PROJECT for e in resp.json)
    # what this realm installed is not part of a catalog
    one = resp.json[0]
    assert "installation_state" not in one and "element" not in one
    full = admin.get(f"{E}/{one['uuid']}").json
    assert one == {k: v for k, v in full.items() if k not in ("installation_state",
                                                              "element")}
    item = anonymous.get(f"{S}/elements/{one['uuid']}")
    assert item.status == 200 and item.json == one
    # the same for every caller: a token (even a broken one) is not read here
    assert world["owner_a"].get(f"{S}/elements").json == resp.json
    assert anonymous.get(f"{S}/elements", token="not-a-token").json == resp.json
    # filters, paging and projection, as for any list
    assert pairs(anonymous.get(f"{S}/elements", query={"name": "beta"}).json) == [
        ("beta", "2.0.0"), ("beta", "2.0.0")]
    assert pairs(anonymous.get(f"{S}/elements", query={"development": "false",
                                                       "name": "alpha"}).json) == [
        ("alpha", "1.0.0"), ("alpha", "1.2.0")]
    page = anonymous.get(f"{S}/elements", query={"page_limit": 2})
    assert len(page.json) == 2 and page.header("X-Pagination-Marker") == page.json[1]["uuid"]
    # elements synced in one batch share a creation time: their order is by uuid
    assert anonymous.get(f"{S}/elements", query={"fields": "name"}).json[0] == {
        "name": resp.json[0]["name"]}


def test_public_catalog_hides_every_other_project(world):
    anonymous = world["anonymous"]
    private = elements_of(world["owner_a"], world["own"]["uuid"])[("alpha", "2.0.0")]
    assert_error(anonymous.get(f"{S}/elements/{private['uuid']}"), 404, "NotFound")
    assert_error(world["owner_a"].get(f"{S}/elements/{private['uuid']}"), 404, "NotFound")
    assert_error(anonymous.get(f"{S}/elements", query={"project_id": world["a"]}), 403,
                 "Forbidden")


@pytest.mark.parametrize("query, word", [
    ({"colour": "red"}, "colour"), ({"installation_state": "INSTALLED"},
                                    "installation_state"),
    ({"development": "maybe"}, "development"), ({"page_limit": "0"}, "page_limit"),
    ({"page_limit": "2", "page_marker": "nope"}, "page_marker"),
    ({"sort_key": "manifest"}, "manifest"), ({"fields": "element"}, "element"),
])
def test_public_catalog_bad_queries_are_400(world, query, word):
    assert_error(world["anonymous"].get(f"{S}/elements", query=query), 400,
                 "ValidationError", word)


def test_public_catalog_is_read_only(world, admin):
    anonymous = world["anonymous"]
    one = anonymous.get(f"{S}/elements").json[0]
    for method, path in (("POST", f"{S}/elements"), ("PUT", f"{S}/elements/{one['uuid']}"),
                         ("DELETE", f"{S}/elements/{one['uuid']}")):
        assert_error(anonymous.request(method, path, {}), 405, "MethodNotAllowed")
        assert_error(admin.request(method, path, {}), 405, "MethodNotAllowed")
    assert admin.get(f"{E}/{one['uuid']}").status == 200


# ---- latest stable versions -------------------------------------------------------

def test_latest_stable_needs_a_permission(world):
    path = f"{S}/latest_stable_elements"
    assert_error(world["anonymous"].get(path), 401, "Unauthorized")
    assert_error(world["newcomer"].get(path), 403, "Forbidden", "repo.element.read")


def test_latest_stable_of_the_shared_catalog(world, admin):
    latest = admin.get(f"{S}/latest_stable_elements").json
    assert pairs(latest) == [("alpha", "1.2.0"), ("beta", "2.0.0")]
    # the same version in two repositories: the preferred one's
    beta = next(e for e in latest if e["name"] == "beta")
    assert beta["repository"] == f"{R}/{world['preferred']['uuid']}"
    assert "installation_state" not in beta and "element" not in beta


def test_latest_stable_of_a_project_adds_its_own(world):
    for client in (world["owner_a"], world["reader_a"]):
        latest = client.get(f"{S}/latest_stable_elements").json
        assert pairs(latest) == [("alpha", "2.0.0"), ("beta", "2.0.0"), ("gamma", "1.0.0")]
        assert {e["project_id"] for e in latest} == {ADMIN_PROJECT, world["a"]}
    assert_error(world["owner_a"].get(f"{S}/latest_stable_elements",
                                      query={"project_id": world["b"]}), 403, "Forbidden")
    only = world["owner_a"].get(f"{S}/latest_stable_elements",
                                query={"project_id": world["a"]}).json
    assert pairs(only) == [("alpha", "2.0.0"), ("gamma", "1.0.0")]
    assert pairs(world["owner_a"].get(f"{S}/latest_stable_elements",
                                      query={"name": "alpha"}).json) == [("alpha", "2.0.0")]


def test_latest_stable_pages_with_page_limit_and_page_marker(world):
    owner = world["owner_a"]
    every = owner.get(f"{S}/latest_stable_elements").json
    seen, marker = [], None
    while True:
        query = {"page_limit": 2, **({"page_marker": marker} if marker else {})}
        resp = owner.get(f"{S}/latest_stable_elements", query=query)
        assert resp.status == 200 and resp.header("X-Pagination-Limit") == "2"
        assert len(resp.json) <= 2
        seen += resp.json
        marker = resp.header("X-Pagination-Marker")
        if not marker:
            break
    assert seen == every and len(seen) == 3
    for query, word in (({"page_limit": "x"}, "page_limit"),
                        ({"page_limit": "1001"}, "page_limit"),
                        ({"page_marker": every[0]["uuid"]}, "page_limit"),
                        ({"page_limit": "1", "page_marker": "nope"}, "page_marker"),
                        ({"development": "x"}, "development"), ({"colour": "x"}, "colour")):
        assert_error(owner.get(f"{S}/latest_stable_elements", query=query), 400,
                     "ValidationError", word)


# ---- artifacts --------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    require_nginx()
    root = tmp_path_factory.mktemp("site")
    publish(root, {"web": ["1.0.0"]})
    with Nginx(static_site(root)) as ngx:
        yield ngx


def nginx_repo(admin, site, project):
    repo = make_repo(admin, {"kind": "nginx", "url": site.url("/")}, project_id=project)
    wait_repo(admin, repo["uuid"])
    return repo, elements_of(admin, repo["uuid"])[("web", "1.0.0")]


def test_artifacts_of_an_element(world, admin, site):
    repo, element = nginx_repo(admin, site, ADMIN_PROJECT)
    listing = admin.get(A, query={"element": element["uuid"]})
    assert listing.status == 200, listing
    base = site.url("/").rstrip("/")
    assert sorted((a["urn"], a["uri"]) for a in listing.json) == [
        ("artifacts:3f1c2e8a-0000-4000-8000-000000000001",
         f"{base}/web/1.0.0/artifacts/notes.txt"),
        ("manifests:3f1c2e8a-0000-4000-8000-000000000002",
         f"{base}/web/1.0.0/manifests/web.yaml")]
    one = listing.json[0]
    assert set(one) == {"uuid", "project_id", "element", "urn", "uri", "created_at",
                        "updated_at"}
    assert one["element"] == f"{E}/{element['uuid']}" and one["project_id"] == ADMIN_PROJECT
    assert admin.get(f"{A}/{one['uuid']}").json == one
    assert admin.get(A, query={"element": f"{E}/{element['uuid']}"}).json == listing.json
    assert admin.get(A, query={"urn": one["urn"], "element": element["uuid"]}).json == [one]
    # the admin project's artifacts belong to the shared catalog: projects read them
    for client in (world["owner_a"], world["reader_a"]):
        assert client.get(A, query={"element": element["uuid"]}).json == listing.json
        assert client.get(f"{A}/{one['uuid']}").status == 200
    # they go with their element
    assert admin.delete(f"{R}/{repo['uuid']}").status == 204
    assert admin.get(A, query={"element": element["uuid"]}).json == []
    assert_error(admin.get(f"{A}/{one['uuid']}"), 404, "NotFound")


def test_artifacts_are_scoped_to_projects(world, admin, site):
    _, theirs = nginx_repo(admin, site, world["b"])
    _, mine = nginx_repo(admin, site, world["a"])
    hidden = admin.get(A, query={"element": theirs["uuid"]}).json
    assert len(hidden) == 2 and {a["project_id"] for a in hidden} == {world["b"]}
    for client in (world["owner_a"], world["reader_a"]):
        seen = client.get(A).json
        assert {a["project_id"] for a in seen} <= {ADMIN_PROJECT, world["a"]}
        assert {a["element"] for a in seen} >= {f"{E}/{mine['uuid']}"}
        assert client.get(A, query={"element": theirs["uuid"]}).json == []
        assert_error(client.get(f"{A}/{hidden[0]['uuid']}"), 404, "NotFound")
        assert_error(client.get(A, query={"project_id": world["b"]}), 403, "Forbidden")
    assert_error(world["anonymous"].get(A), 401, "Unauthorized")
    assert_error(world["anonymous"].get(f"{A}/{hidden[0]['uuid']}"), 401, "Unauthorized")
    assert_error(world["newcomer"].get(A), 403, "Forbidden", "repo.artifact.read")


def test_artifacts_bad_input_and_read_only(world, admin, site):
    one = admin.get(A).json[0]
    for query, word in (({"element": "nope"}, "element"), ({"colour": "x"}, "colour"),
                        ({"page_limit": "-1"}, "page_limit"), ({"sort_key": "x"}, "x")):
        assert_error(admin.get(A, query=query), 400, "ValidationError", word)
    assert_error(admin.get(f"{A}/not-a-uuid"), 404, "NotFound")
    for method, path in (("POST", A), ("PUT", f"{A}/{one['uuid']}"),
                         ("DELETE", f"{A}/{one['uuid']}")):
        assert_error(admin.request(method, path, {"urn": "x:y"}), 405, "MethodNotAllowed")
    assert admin.get(f"{A}/{one['uuid']}").json == one
