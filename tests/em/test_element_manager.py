"""Element Manager: install, upgrade, uninstall, links, imports and repair, with the real
builder and delivery daemons running."""

import time
import uuid

import pytest

from tests.secret.conftest import remember, wait_for

from .conftest import (ADMIN_PROJECT, act, builder_log, element, install, post_manifest,
                       wait_element)

P = ADMIN_PROJECT


def app_manifest(name="app", version="1.0.0", extra=None, db_url=None):
    resources = {
        "$core.secret.passwords": {
            "db_password": {"name": f"{name}-db-password", "project_id": P},
        },
        "$core.secret.secrets": {
            "db_url": {"name": f"{name}-db-url", "project_id": P,
                       "constructor": {"kind": "plain"},
                       "default_value": db_url or
                       f'f"postgres://{name}:{{${name}.secret.passwords.$db_password:value}}'
                       f'@db/{name}"'},
            "db_password_copy": {"name": f"{name}-db-password-copy", "project_id": P,
                                 "constructor": {"kind": "plain"},
                                 "default_value": f"${name}.secret.passwords.$db_password:value"},
        },
    }
    for path, entries in (extra or {}).items():
        resources.setdefault(path, {}).update(entries)
    return {"name": name, "version": version, "schema_version": 1, "api_version": "v1",
            "description": f"{name} for tests", "requirements": {"core": {"from_version": "0.0.0"}},
            "resources": resources,
            "exports": {"db_password": {"link": f"${name}.secret.passwords.$db_password",
                                        "kind": "resource"}}}


def owned(admin, elem, key):
    slot = elem["resources"][key]
    return admin.get(f"{slot['collection']}/{slot['uuid']}").json


def test_install_materializes_resources_with_links(admin):
    install(admin, app_manifest())
    elem = wait_element(admin, "app")
    assert elem["version"] == "1.0.0"
    password = owned(admin, elem, "secret.passwords.$db_password")
    remember(password["value"])
    url = owned(admin, elem, "secret.secrets.$db_url")
    copy = owned(admin, elem, "secret.secrets.$db_password_copy")
    assert url["default_value"] == f"postgres://app:{password['value']}@db/app"
    assert copy["default_value"] == password["value"]
    assert all(slot["status"] == "ACTIVE" for slot in elem["resources"].values())
    # the secrets go on to the data plane like any other
    wait_for(lambda: owned(admin, elem, "secret.secrets.$db_url")["status"] == "ACTIVE")


def test_install_twice_is_409(admin):
    resp = post_manifest(admin, app_manifest(version="1.0.1"))
    assert act(admin, resp.json["uuid"], "install").status == 409


def test_upgrade_adds_changes_removes_and_keeps_operator_values(admin):
    elem = wait_element(admin, "app")
    copy_before = owned(admin, elem, "secret.secrets.$db_password_copy")
    operator_value = remember(f"operator-{uuid.uuid4().hex}")
    url_uuid = elem["resources"]["secret.secrets.$db_url"]["uuid"]
    assert admin.put(f"/v1/secret/secrets/{url_uuid}", {"value": operator_value}).status == 200
    v2 = app_manifest(version="1.1.0", db_url="postgres://changed-default",
                      extra={"$core.secret.secrets": {
                          "added": {"name": "app-added", "project_id": P,
                                    "constructor": {"kind": "plain"}, "default_value": "new"}}})
    del v2["resources"]["$core.secret.secrets"]["db_password_copy"]
    resp = post_manifest(admin, v2)
    assert resp.status == 201, resp
    assert act(admin, resp.json["uuid"], "upgrade").status == 200
    elem = wait_for(lambda: (e := element(admin, "app")) and e["version"] == "1.1.0"
                    and e["status"] == "ACTIVE" and "secret.secrets.$added" in e["resources"]
                    and e)
    url = owned(admin, elem, "secret.secrets.$db_url")
    assert url["uuid"] == url_uuid
    assert url["default_value"] == "postgres://changed-default"     # changed by the manifest
    assert url["value"] == operator_value                            # the operator's survives
    assert owned(admin, elem, "secret.secrets.$added")["default_value"] == "new"
    assert "secret.secrets.$db_password_copy" not in elem["resources"]
    assert admin.get(f"/v1/secret/secrets/{copy_before['uuid']}").status == 404


def test_deleted_resource_is_restored_and_reported(admin, server):
    elem = wait_element(admin, "app")
    slot = elem["resources"]["secret.secrets.$added"]
    # the API refuses to delete what an element owns (docs/api.md "In use")...
    message = admin.delete(f"/v1/secret/secrets/{slot['uuid']}").json["message"]
    assert "Element 'app'" in message, message
    # ...so the record is lost behind the element's back the other way: from the store
    server.store.collection("secret_secrets").delete(slot["uuid"])
    started = time.monotonic()
    wait_for(lambda: admin.get(f"/v1/secret/secrets/{slot['uuid']}").status == 200,
             timeout=5, interval=0.01)
    restored_in = time.monotonic() - started
    elem = wait_for(lambda: (e := element(admin, "app")) and e["last_repair"] and e)
    assert "secret.secrets.$added" in elem["last_repair"]["resources"]
    assert restored_in < 1.0, restored_in
    # altered behind its back: the declared field comes back, the rest stays
    assert admin.put(f"/v1/secret/secrets/{slot['uuid']}",
                     {"default_value": "tampered"}).status == 200
    wait_for(lambda: admin.get(f"/v1/secret/secrets/{slot['uuid']}").json[
        "default_value"] == "new", timeout=5)


def test_consumer_waits_for_a_value_then_resolves(admin, server):
    manifest = {
        "name": "waiter", "version": "1.0.0", "resources": {"$core.secret.secrets": {
            "source": {"name": "waiter-source", "project_id": P,
                       "constructor": {"kind": "plain"}},
            "consumer": {"name": "waiter-consumer", "project_id": P,
                         "constructor": {"kind": "plain"},
                         "default_value": "$waiter.secret.secrets.$source:value"}}}}
    install(admin, manifest)
    elem = wait_for(lambda: (e := element(admin, "waiter")) and e["status"] == "IN_PROGRESS"
                    and e["resources"].get("secret.secrets.$consumer", {}).get("status")
                    == "WAITING" and e)
    assert "value" in elem["status_reason"]
    line = "target state unavailable for $waiter.secret.secrets.$consumer by reason value"
    wait_for(lambda: line in builder_log(server))
    time.sleep(0.5)          # more passes happen (other kinds change), still one line
    assert builder_log(server).count(line) == 1
    assert admin.get("/v1/secret/secrets", query={"name": "waiter-consumer"}).json == []
    value = remember(f"finally-{uuid.uuid4().hex}")
    source = elem["resources"]["secret.secrets.$source"]["uuid"]
    assert admin.put(f"/v1/secret/secrets/{source}", {"value": value}).status == 200
    elem = wait_element(admin, "waiter")
    assert owned(admin, elem, "secret.secrets.$consumer")["default_value"] == value


def test_imports_of_exported_resources(admin):
    consumer = {
        "name": "user_of_app", "version": "0.1.0",
        "requirements": {"app": {"from_version": "1.0.0", "to_version": "2.0.0"}},
        "imports": {"app_password": {"element": "$app", "kind": "resource",
                                     "link": "$app.secret.passwords.$db_password"}},
        "resources": {"$core.secret.secrets": {"copy": {
            "name": "user-of-app-copy", "project_id": P, "constructor": {"kind": "plain"},
            "default_value": "$user_of_app.imports.$app_password:value"}}}}
    install(admin, consumer)
    elem = wait_element(admin, "user_of_app")
    app = element(admin, "app")
    assert owned(admin, elem, "secret.secrets.$copy")["default_value"] == owned(
        admin, app, "secret.passwords.$db_password")["value"]


@pytest.mark.parametrize("link,words", [
    ("$app.secret.secrets.$db_url", ["app", "does not export"]),
    ("$app.secret.passwords.$nothing", ["app", "does not export"]),
])
def test_import_of_what_is_not_exported_is_400(admin, link, words):
    bad = {"name": "bad_import", "version": "0.1.0",
           "imports": {"x": {"element": "$app", "kind": "resource", "link": link}},
           "resources": {}}
    resp = post_manifest(admin, bad)
    if resp.status == 409:       # same name and version from the parametrized twin
        resp_uuid = admin.get("/v1/em/manifests", query={"name": "bad_import"}).json[0]["uuid"]
    else:
        assert resp.status == 201, resp
        resp_uuid = resp.json["uuid"]
    result = act(admin, resp_uuid, "install")
    assert result.status == 400, result
    for word in words + ["import x"]:
        assert word in result.json["message"]
    assert element(admin, "bad_import") is None


def test_import_from_unknown_element_is_400(admin):
    bad = {"name": "orphan_import", "version": "0.1.0",
           "imports": {"x": {"element": "$ghost", "link": "$ghost.secret.secrets.$s"}},
           "resources": {}}
    resp = post_manifest(admin, bad)
    result = act(admin, resp.json["uuid"], "install")
    assert result.status == 400 and "ghost" in result.json["message"]


def test_uninstall_refused_while_required_in_range(admin):
    app = element(admin, "app")
    manifest_uuid = app["manifest"].rsplit("/", 1)[1]
    resp = act(admin, manifest_uuid, "uninstall")
    assert resp.status == 409
    assert "user_of_app" in resp.json["message"] and "requires app" in resp.json["message"]
    assert element(admin, "app")["desired"] == "installed"


def test_validate_reports_without_changing(admin):
    resp = post_manifest(admin, app_manifest(name="other", version="3.0.0"))
    report = admin.get(f"/v1/em/manifests/{resp.json['uuid']}/actions/validate").json
    assert report["valid"] is True
    assert report["order"].index("secret.passwords.$db_password") < report["order"].index(
        "secret.secrets.$db_url")
    assert element(admin, "other") is None


def test_uninstall_removes_owned_resources(admin):
    user = element(admin, "user_of_app")
    copy_uuid = user["resources"]["secret.secrets.$copy"]["uuid"]
    assert act(admin, user["manifest"].rsplit("/", 1)[1], "uninstall").status == 200
    wait_for(lambda: element(admin, "user_of_app") is None)
    assert admin.get(f"/v1/secret/secrets/{copy_uuid}").status == 404
    # nothing requires app now
    app = element(admin, "app")
    assert act(admin, app["manifest"].rsplit("/", 1)[1], "uninstall").status == 200
    wait_for(lambda: element(admin, "app") is None)


def test_dns_domain_and_records_from_a_manifest(admin, server):
    manifest = {
        "name": "zoned", "version": "1.0.0", "resources": {
            "$core.dns.domains": {"zone": {"name": "zoned.test", "project_id": P}},
            "$core.dns.domains.$zone.records": {
                "www": {"type": "A", "record": {"kind": "A", "name": "www",
                                                "address": "10.20.0.7"}},
                "txt": {"domain": "$zoned.dns.domains.$zone:uuid", "type": "TXT",
                        "record": {"kind": "TXT", "name": "@",
                                   "content": 'f"zone {$zoned.dns.domains.$zone:name}"'}}}}}
    install(admin, manifest)
    elem = wait_element(admin, "zoned")
    zone = elem["resources"]["dns.domains.$zone"]["uuid"]
    found = {r["record"]["name"] + "/" + r["type"]: r
             for r in admin.get(f"/v1/dns/domains/{zone}/records").json}
    assert found["www/A"]["record"]["address"] == "10.20.0.7"
    assert found["@/TXT"]["record"]["content"] == "zone zoned.test"
    assert "@/SOA" in found
    # a record the element owns is not deleted through the API (409); one lost behind
    # the element's back (here: from the store) comes back
    www = elem["resources"]["dns.domains.$zone.records.$www"]["uuid"]
    assert admin.delete(f"/v1/dns/domains/{zone}/records/{www}").status == 409
    assert admin.delete(f"/v1/dns/domains/{zone}").status == 409
    server.store.collection("dns_records").delete(www)
    wait_for(lambda: admin.get(f"/v1/dns/domains/{zone}/records/{www}").status == 200)


def test_status_moves_new_in_progress_active(admin, server):
    """The builder's writes of the element, seen in the store's history of it."""
    seen = []
    manifest = {"name": "mover", "version": "1.0.0", "resources": {"$core.secret.secrets": {
        f"s{i}": {"name": f"mover-{i}", "project_id": P, "constructor": {"kind": "plain"}}
        for i in range(30)}}}
    install(admin, manifest)
    coll = server.store.collection("em_elements")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        e = coll.find_one(name="mover")
        if e and (not seen or seen[-1] != e["status"]):
            seen.append(e["status"])
        if e and e["status"] == "ACTIVE":
            break
        time.sleep(0.001)
    assert seen[-1] == "ACTIVE"
    assert "ERROR" not in seen
    # NEW is written by the action, IN_PROGRESS by the builder as it starts
    assert seen[0] in ("NEW", "IN_PROGRESS")
    assert "IN_PROGRESS" in seen       # 30 resources take far longer than the 1 ms polling


def test_an_element_zone_follows_the_one_owner_rule(admin):
    """An element's zone goes through the DNS API's creation, so the rule holds for the
    project it declares: inside another project's zone it is refused, the element is
    ERROR with the reason, and nothing is created."""
    victim = admin.post("/v1/iam/projects", {"name": f"v{uuid.uuid4().hex[:8]}"}).json["uuid"]
    intruder = admin.post("/v1/iam/projects",
                          {"name": f"i{uuid.uuid4().hex[:8]}"}).json["uuid"]
    assert admin.post("/v1/dns/domains", {"name": "owned-em.test",
                                          "project_id": victim}).status == 201
    before = sorted(d["uuid"] for d in admin.get("/v1/dns/domains").json)
    manifest = {"name": "squatter", "version": "1.0.0", "resources": {
        "$core.dns.domains": {"zone": {"name": "www.owned-em.test", "project_id": intruder}},
        "$core.dns.domains.$zone.records": {
            "www": {"type": "A", "record": {"kind": "A", "name": "@",
                                            "address": "10.32.9.9"}}}}}
    install(admin, manifest)
    elem = wait_element(admin, "squatter", status="ERROR")
    assert "one owner" in elem["status_reason"], elem["status_reason"]
    assert sorted(d["uuid"] for d in admin.get("/v1/dns/domains").json) == before
    # in its own project's zone, an element's zone is made as before
    assert admin.post("/v1/dns/domains", {"name": "mine-em.test",
                                          "project_id": intruder}).status == 201
    install(admin, {**manifest, "name": "nester", "resources": {
        "$core.dns.domains": {"zone": {"name": "www.mine-em.test", "project_id": intruder}}}})
    wait_element(admin, "nester")
