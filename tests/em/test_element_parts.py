"""An element's resources, imports and exports as the reference's read-only collections,
nested under the element and flat, with the real builder running."""

import uuid

import pytest

from tests.iam.helpers import bind, make_user

from .conftest import ADMIN_PROJECT, act, install, post_manifest, wait_element

P = ADMIN_PROJECT
E = "/v1/em/elements"


def provider():
    return {
        "name": "prov", "version": "1.0.0",
        "resources": {
            "$core.secret.passwords": {"pw": {"name": "prov-pw", "project_id": P}},
            "$core.dns.domains": {"zone": {"name": "parts.test", "project_id": P}},
            "$core.dns.domains.$zone.records": {
                "www": {"type": "A", "record": {"kind": "A", "name": "www",
                                                "address": "10.1.2.3"}}},
        },
        "exports": {"password": {"link": "$prov.secret.passwords.$pw", "kind": "resource"}},
    }


def consumer():
    return {
        "name": "cons", "version": "1.0.0",
        "imports": {"their_pw": {"element": "$prov", "kind": "resource",
                                 "link": "$prov.secret.passwords.$pw"}},
        "resources": {"$core.secret.secrets": {"copy": {
            "name": "cons-copy", "project_id": P, "constructor": {"kind": "plain"},
            "default_value": "$cons.imports.$their_pw:value"}}},
    }


@pytest.fixture(scope="module")
def installed(admin):
    install(admin, provider())
    prov = wait_element(admin, "prov")
    install(admin, consumer())
    cons = wait_element(admin, "cons")
    return prov, cons


def listed(admin, path, **query):
    resp = admin.get(path, query=query)
    assert resp.status == 200, resp
    return resp.json


def assert_error(resp, status, type_, *words):
    assert resp.status == status, resp
    assert set(resp.json) == {"type", "code", "message"} and resp.json["code"] == status
    assert resp.json["type"] == type_
    for word in words:
        assert word in resp.json["message"], resp.json["message"]


def test_an_elements_resources_nested_and_flat(admin, installed):
    prov, _ = installed
    nested = listed(admin, f"{E}/{prov['uuid']}/resources")
    by_link = {r["link"]: r for r in nested}
    assert set(by_link) == {"$core.secret.passwords.$pw", "$core.dns.domains.$zone",
                            "$core.dns.domains.$zone.records.$www"}
    pw = by_link["$core.secret.passwords.$pw"]
    slot = prov["resources"]["secret.passwords.$pw"]
    assert pw == {"uuid": slot["uuid"], "element": f"{E}/{prov['uuid']}", "name": "pw",
                  "kind": "em_core_secret_passwords", "link": "$core.secret.passwords.$pw",
                  "resource": f"/v1/secret/passwords/{slot['uuid']}", "status": "ACTIVE",
                  "status_reason": None, "created_at": prov["created_at"],
                  "updated_at": prov["updated_at"]}
    # the resource path is one a client can follow, a sub-collection's included
    www = by_link["$core.dns.domains.$zone.records.$www"]
    assert www["kind"] == "em_core_dns_domains_records"
    zone = prov["resources"]["dns.domains.$zone"]["uuid"]
    assert www["resource"] == f"/v1/dns/domains/{zone}/records/{www['uuid']}"
    for row in nested:
        followed = admin.get(row["resource"])
        assert followed.status == 200 and followed.json["uuid"] == row["uuid"], followed

    item = admin.get(f"{E}/{prov['uuid']}/resources/{pw['uuid']}")
    assert item.status == 200 and item.json == pw
    # flat: every element's, filtered by element (uuid or path) like any collection
    assert pw in listed(admin, "/v1/em/resources")
    assert listed(admin, "/v1/em/resources", element=prov["uuid"]) == nested
    assert listed(admin, "/v1/em/resources", element=f"{E}/{prov['uuid']}") == nested
    assert admin.get(f"/v1/em/resources/{pw['uuid']}").json == pw
    assert [r["name"] for r in listed(admin, "/v1/em/resources",
                                      kind="em_core_dns_domains_records")] == ["www"]


def test_imports_and_exports(admin, installed):
    prov, cons = installed
    exports = listed(admin, f"{E}/{prov['uuid']}/exports")
    pw_uuid = prov["resources"]["secret.passwords.$pw"]["uuid"]
    assert [(x["name"], x["kind"], x["link"], x["resource"], x["element"])
            for x in exports] == [("password", "resource", "$prov.secret.passwords.$pw",
                                   f"/v1/em/resources/{pw_uuid}", f"{E}/{prov['uuid']}")]
    assert listed(admin, f"{E}/{cons['uuid']}/exports") == []
    imports = listed(admin, f"{E}/{cons['uuid']}/imports")
    assert [(i["name"], i["kind"], i["link"], i["from_element"], i["from_resource"])
            for i in imports] == [("their_pw", "resource", "$prov.secret.passwords.$pw",
                                   f"{E}/{prov['uuid']}", f"/v1/em/resources/{pw_uuid}")]
    # an import's uuid is the same on every read: it can be fetched and paged by
    again = admin.get(f"/v1/em/imports/{imports[0]['uuid']}")
    assert again.status == 200 and again.json == imports[0]
    assert admin.get(f"{E}/{cons['uuid']}/imports/{imports[0]['uuid']}").json == imports[0]
    assert listed(admin, "/v1/em/imports", element=cons["uuid"]) == imports
    assert listed(admin, "/v1/em/exports", name="password") == exports
    assert listed(admin, "/v1/em/imports", element=prov["uuid"]) == []


def test_paging_and_projection(admin, installed):
    every = listed(admin, "/v1/em/resources")
    seen, marker = [], None
    while True:
        query = {"page_limit": 2, **({"page_marker": marker} if marker else {})}
        resp = admin.get("/v1/em/resources", query=query)
        assert resp.status == 200
        seen += resp.json
        marker = resp.header("X-Pagination-Marker")
        if not marker:
            break
    assert seen == every
    assert listed(admin, "/v1/em/exports", fields=["name"]) == [{"name": "password"}]


def test_the_views_follow_the_element(admin, installed):
    """No copy to lag behind: an uninstalled element's parts are gone at once with it."""
    manifest = {"name": "brief", "version": "1.0.0", "resources": {
        "$core.secret.passwords": {"only": {"name": "brief-pw", "project_id": P}}}}
    uuid_ = install(admin, manifest)
    brief = wait_element(admin, "brief")
    assert len(listed(admin, f"{E}/{brief['uuid']}/resources")) == 1
    assert act(admin, uuid_, "uninstall").status == 200
    from tests.secret.conftest import wait_for  # noqa: PLC0415
    wait_for(lambda: admin.get(f"{E}/{brief['uuid']}/resources").status == 404)
    assert listed(admin, "/v1/em/resources", element=brief["uuid"]) == []


def test_bad_requests_and_read_only(admin, installed):
    prov, cons = installed
    ghost = str(uuid.uuid4())
    for part in ("resources", "imports", "exports"):
        assert_error(admin.get(f"{E}/{ghost}/{part}"), 404, "NotFound")
        assert_error(admin.get(f"{E}/{prov['uuid']}/{part}/{ghost}"), 404, "NotFound")
        assert_error(admin.get(f"/v1/em/{part}/{ghost}"), 404, "NotFound")
        assert_error(admin.get(f"/v1/em/{part}/not-a-uuid"), 404, "NotFound")
        assert_error(admin.get(f"/v1/em/{part}", query={"element": "nope"}), 400,
                     "ValidationError", "element")
        assert_error(admin.get(f"/v1/em/{part}", query={"colour": "red"}), 400,
                     "ValidationError", "colour")
        assert_error(admin.get(f"/v1/em/{part}", query={"page_limit": "x"}), 400,
                     "ValidationError")
        for method in ("POST", "PUT", "DELETE"):
            assert_error(admin.request(method, f"/v1/em/{part}", {}), 405,
                         "MethodNotAllowed")
            assert_error(admin.request(method, f"{E}/{prov['uuid']}/{part}", {}), 405,
                         "MethodNotAllowed")
    # an item under the wrong element is not found there
    pw = listed(admin, f"{E}/{prov['uuid']}/resources")[0]
    assert_error(admin.get(f"{E}/{cons['uuid']}/resources/{pw['uuid']}"), 404, "NotFound")
    # nothing of this is a collection a manifest can declare
    resp = post_manifest(admin, {"name": "sneaky", "version": "1.0.0", "resources": {
        "$core.em.resources": {"x": {}}}})
    assert_error(resp, 400, "ValidationError", "unknown resource path")


def test_deny_by_default(server, admin, installed):
    prov, _ = installed
    paths = [f"{E}/{prov['uuid']}/{p}" for p in ("resources", "imports", "exports")] + [
        f"/v1/em/{p}" for p in ("resources", "imports", "exports")]
    user, name, password = make_user(admin)
    nobody = server.client(server.login(name, password))
    owner_id, owner_name, owner_password = make_user(admin)
    bind(admin, owner_id, "owner", ADMIN_PROJECT)
    # a project owner has no Element Manager rights (elements span projects)
    owner = server.client(server.login(owner_name, owner_password,
                                       scope=f"project:{ADMIN_PROJECT}"))
    for path in paths:
        assert_error(server.client().get(path), 401, "Unauthorized")
        assert_error(nobody.get(path), 403, "Forbidden", "em.element.read")
        assert_error(owner.get(path), 403, "Forbidden")
