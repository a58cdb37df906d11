"""Repositories and their sync (spec 2.3, 2.6, 3.2) with local and database drivers."""

import os
import uuid

import pytest

from tests.iam.helpers import bind, make_project, make_user
from tests.secret.conftest import wait_for

from .conftest import (ADMIN_PROJECT, E, R, elements_of, make_repo, manifest, wait_element,
                       wait_repo, write_manifest)


def test_bootstrap_copy_repository_syncs(admin, tmp_path):
    write_manifest(tmp_path, manifest("alpha", "1.0.0"))
    write_manifest(tmp_path, manifest("alpha", "1.1.0-dev.1"))
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / "broken.yaml").write_text("name: [x")
    (tmp_path / "partial.yaml").write_text("name: x\nversion: 1.0.0\n")   # no resources
    repo = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(tmp_path)})
    assert repo["status"] == "NEW"
    assert repo["priority"] == 8192 and repo["refresh_rate"] == 3600
    assert "next_refresh" not in repo
    repo = wait_repo(admin, repo["uuid"])
    assert repo["synced_at"] is not None and "next_refresh" not in repo
    found = elements_of(admin, repo["uuid"])
    assert set(found) == {("alpha", "1.0.0"), ("alpha", "1.1.0-dev.1")}
    release = found[("alpha", "1.0.0")]
    assert release["status"] == "AVAILABLE" and release["installation_state"] == "UNINSTALLED"
    assert release["manifest"]["name"] == "alpha" and release["development"] is False
    assert release["repository"] == f"{R}/{repo['uuid']}"
    assert found[("alpha", "1.1.0-dev.1")]["development"] is True
    hidden = elements_of(admin, repo["uuid"], development="false")
    assert set(hidden) == {("alpha", "1.0.0")}


def test_lazy_repository_stores_names_then_downloads_on_get(admin, tmp_path):
    write_manifest(tmp_path, manifest("beta", "2.0.0"))
    repo = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(tmp_path)},
                     sync_mode="lazy")
    wait_repo(admin, repo["uuid"])
    listed = elements_of(admin, repo["uuid"])[("beta", "2.0.0")]
    assert listed["manifest"] is None
    got = admin.get(f"{E}/{listed['uuid']}").json
    assert got["manifest"]["name"] == "beta"
    assert elements_of(admin, repo["uuid"])[("beta", "2.0.0")]["manifest"] is not None


def test_refresh_adds_and_removes_but_keeps_installed(admin, tmp_path):
    write_manifest(tmp_path, manifest("gamma", "1.0.0"))
    old = write_manifest(tmp_path, manifest("gamma", "0.9.0"))
    repo = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(tmp_path)})
    wait_repo(admin, repo["uuid"])
    installed = elements_of(admin, repo["uuid"])[("gamma", "1.0.0")]
    assert admin.post(f"{E}/{installed['uuid']}/actions/install/invoke", {}).status == 200
    wait_for(lambda: admin.get(f"{E}/{installed['uuid']}").json["status"] == "ACTIVE",
             timeout=20)
    os.unlink(old)
    os.unlink(tmp_path / "gamma-1.0.0.yaml")            # gone upstream, but installed
    write_manifest(tmp_path, manifest("gamma", "1.2.0"))
    synced = admin.get(f"{R}/{repo['uuid']}").json["synced_at"]
    resp = admin.post(f"{R}/{repo['uuid']}/actions/refresh/invoke", {})
    assert resp.status == 200
    wait_for(lambda: admin.get(f"{R}/{repo['uuid']}").json["synced_at"] != synced)
    assert set(elements_of(admin, repo["uuid"])) == {("gamma", "1.0.0"), ("gamma", "1.2.0")}
    assert admin.post(f"{E}/{installed['uuid']}/actions/uninstall/invoke", {}).status == 200
    wait_for(lambda: admin.get(f"{E}/{installed['uuid']}").json["status"] == "AVAILABLE",
             timeout=20)


def test_unreadable_repository_is_error_with_reason(admin, tmp_path):
    repo = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(tmp_path / "nope")})
    repo = wait_repo(admin, repo["uuid"], "ERROR")
    assert "not a directory" in repo["status_reason"]
    (tmp_path / "nope").mkdir()
    admin.post(f"{R}/{repo['uuid']}/actions/refresh/invoke", {})
    wait_repo(admin, repo["uuid"], "ACTIVE")


def test_credentials_are_never_returned(admin):
    repo = make_repo(admin, {"kind": "nginx", "url": "http://127.0.0.1:9/repo/",
                             "username": "u", "password": "hunter2-secret"})
    assert repo["driver_spec"]["url"] == "http://127.0.0.1:9/repo"     # slash or not: same
    assert repo["driver_spec"]["password"] == "********"
    for shown in (admin.get(f"{R}/{repo['uuid']}"), admin.get(R)):
        assert b"hunter2" not in shown.raw
    # sending back what was read keeps the password; the stored form is sealed
    admin.put(f"{R}/{repo['uuid']}", {"driver_spec": admin.get(f"{R}/{repo['uuid']}").json[
        "driver_spec"], "priority": 10})
    record = admin.get(f"{R}/{repo['uuid']}").json
    assert record["priority"] == 10 and record["driver_spec"]["password"] == "********"


@pytest.mark.parametrize("body,word", [
    ({"priority": 16385}, "priority"), ({"priority": -1}, "priority"),
    ({"refresh_rate": -5}, "refresh_rate"), ({"sync_mode": "mirror"}, "sync_mode"),
    ({"driver_spec": {"kind": "ftp"}}, "driver_spec.kind"),
    ({"driver_spec": {"kind": "nginx"}}, "url"),
    ({"driver_spec": {"kind": "nginx", "url": "ftp://x/y"}}, "url"),
    ({"driver_spec": {"kind": "nginx", "url": "http://x", "extra": 1}}, "extra"),
    ({"driver_spec": {"kind": "bootstrap"}}, "manifests_dir"),
    ({"driver_spec": {"kind": "database"}, "name": "x" * 256}, "name"),
    ({"driver_spec": {"kind": "database"}, "next_refresh": "2020-01-01T00:00:00Z"},
     "next_refresh"),
    ({"driver_spec": {"kind": "database"}, "project_id": str(uuid.uuid4())}, "project"),
])
def test_repository_validation(admin, body, word):
    full = {"name": f"bad-{uuid.uuid4().hex[:6]}", "project_id": ADMIN_PROJECT,
            "driver_spec": {"kind": "database"}, **body}
    resp = admin.post(R, full)
    assert resp.status == 400, resp
    assert word in resp.json["message"]


def test_status_is_read_only_and_names_unique_per_project(admin):
    repo = make_repo(admin, {"kind": "database"})
    assert admin.put(f"{R}/{repo['uuid']}", {"status": "DISABLED"}).status == 403
    dup = admin.post(R, {"name": repo["name"], "project_id": ADMIN_PROJECT,
                         "driver_spec": {"kind": "database"}})
    assert dup.status == 409


def test_upload_to_database_repository(admin):
    repo = wait_repo(admin, make_repo(admin, {"kind": "database"})["uuid"])
    body = {"element_name": "up", "element_version": "1.0.0",
            "manifest": manifest("up", "1.0.0"), "description": "uploaded"}
    resp = admin.post(f"{R}/{repo['uuid']}/actions/upload/invoke", body)
    assert resp.status == 200, resp
    assert resp.json["name"] == "up" and resp.json["status"] == "AVAILABLE"
    assert admin.post(f"{R}/{repo['uuid']}/actions/upload/invoke", body).status == 409
    wrong = dict(body, element_version="2.0.0")
    resp = admin.post(f"{R}/{repo['uuid']}/actions/upload/invoke", wrong)
    assert resp.status == 400 and "version" in resp.json["message"]


def test_upload_and_install_of_a_hyphenated_element(admin):
    """The reference's functional tests upload `test-element-1`: accepted, installed and
    ACTIVE under that name, in the repository and in the Element Manager."""
    repo = wait_repo(admin, make_repo(admin, {"kind": "database"})["uuid"])
    resp = admin.post(f"{R}/{repo['uuid']}/actions/upload/invoke", {
        "element_name": "test-element-1", "element_version": "1.0.0",
        "manifest": manifest("test-element-1", "1.0.0")})
    assert resp.status == 200, resp
    assert resp.json["name"] == "test-element-1"
    installed = admin.post(f"{E}/{resp.json['uuid']}/actions/install/invoke", {})
    assert installed.status == 200, installed
    assert wait_element(admin, resp.json["uuid"], "ACTIVE")["name"] == "test-element-1"
    em = admin.get("/v1/em/elements", query={"name": "test-element-1"}).json
    assert [e["status"] for e in em] == ["ACTIVE"]


@pytest.mark.parametrize("name,changes,word", [
    ("Bad-Name", {}, "name"),             # upper case: the Element Manager refuses the name
    ("ok_name", {"resources": {"$core.secret.nothing": {"x": {}}}}, "resources"),
    ("ok_name", {"resources": {"$core.secret.passwords": {"x": {"name": "x"}}}},
     "project_id"),
])
def test_upload_refuses_a_manifest_the_element_manager_would_refuse(admin, name, changes,
                                                                     word):
    # found at upload, not later by the builder where only its log would say why
    repo = wait_repo(admin, make_repo(admin, {"kind": "database"})["uuid"])
    resp = admin.post(f"{R}/{repo['uuid']}/actions/upload/invoke", {
        "element_name": name, "element_version": "1.0.0",
        "manifest": {**manifest(name, "1.0.0"), **changes}})
    assert resp.status == 400, resp
    assert resp.json["message"].startswith("manifest: ") and word in resp.json["message"]
    assert admin.get(E, query={"repository": repo["uuid"]}).json == []


def test_upload_refused_by_driver_without_upload(admin, tmp_path):
    repo = wait_repo(admin, make_repo(admin, {"kind": "bootstrap",
                                              "manifests_dir": str(tmp_path)})["uuid"])
    resp = admin.post(f"{R}/{repo['uuid']}/actions/upload/invoke", {
        "element_name": "x", "element_version": "1.0.0", "manifest": manifest("x", "1.0.0")})
    assert resp.status == 409 and "upload" in resp.json["message"]


def test_upload_refused_before_active(tmp_path):
    """No builder here: the repository stays NEW."""
    from tests.apiserver import ApiServer
    from tests.conftest import ADMIN_PASSWORD
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        repo = make_repo(admin, {"kind": "database"})
        resp = admin.post(f"{R}/{repo['uuid']}/actions/upload/invoke", {
            "element_name": "x", "element_version": "1.0.0",
            "manifest": manifest("x", "1.0.0")})
        assert resp.status == 409 and "NEW" in resp.json["message"]
    finally:
        srv.stop()


def test_project_scoping_of_repositories(server, admin):
    own, third = make_project(admin), make_project(admin)
    user, name, password = make_user(admin)
    bind(admin, user, "owner", own)
    owner = server.client(server.login(name, password, scope=f"project:{own}"))
    shared = make_repo(admin, {"kind": "database"})
    theirs = make_repo(admin, {"kind": "database"}, project_id=third)
    mine = owner.post(R, {"name": "mine", "driver_spec": {"kind": "database"}})
    assert mine.status == 201 and mine.json["project_id"] == own
    seen = {r["uuid"] for r in owner.get(R).json}
    assert shared["uuid"] in seen and mine.json["uuid"] in seen
    assert theirs["uuid"] not in seen
    assert owner.get(R, query={"project_id": third}).status == 403
    assert owner.get(R, query={"project_id": ADMIN_PROJECT}).status == 200
    assert owner.get(f"{R}/{shared['uuid']}").status == 200
    assert owner.get(f"{R}/{theirs['uuid']}").status == 404
    # the admin project's repositories are read-only for a project's owner
    assert owner.post(f"{R}/{shared['uuid']}/actions/refresh/invoke", {}).status == 403
    assert owner.put(f"{R}/{shared['uuid']}", {"priority": 1}).status == 403
    assert owner.delete(f"{R}/{shared['uuid']}").status == 403
    assert owner.post(R, {"name": "into-admin", "project_id": ADMIN_PROJECT,
                          "driver_spec": {"kind": "database"}}).status == 403


def test_realm_repo_url_is_registered_at_bootstrap(tmp_path):
    from tests.apiserver import ApiServer
    from tests.conftest import ADMIN_PASSWORD
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD,
                    repo_url="http://127.0.0.1:9/realm-repo/").start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        repos = admin.get(R, query={"name": "realm"}).json
        assert len(repos) == 1
        realm = repos[0]
        assert realm["project_id"] == ADMIN_PROJECT and realm["sync_mode"] == "lazy"
        assert realm["refresh_rate"] == 3600
        assert realm["driver_spec"] == {"kind": "nginx", "url": "http://127.0.0.1:9/realm-repo"}
        from appliance.bootstrap import bootstrap
        bootstrap(srv.settings)                       # a second start adds nothing
        assert len(admin.get(R, query={"name": "realm"}).json) == 1
    finally:
        srv.stop()


def test_dummy_migration_repository_keeps_stored_elements(admin, server):
    repo = wait_repo(admin, make_repo(admin, {"kind": "dummy_migration"})["uuid"])
    assert elements_of(admin, repo["uuid"]) == {}
    # elements attached by a migration are stored data, not dropped as stale on refresh
    elements = server.api.resources["/v1/repo/elements"]
    from appliance.repo import inventory
    stored = server.store.collection("repo_repositories").get(repo["uuid"])
    elements.new_element(stored, inventory.entry("legacy", "0.9.0"),
                         {"name": "legacy", "version": "0.9.0", "resources": {}})
    synced = repo["synced_at"]
    admin.post(f"{R}/{repo['uuid']}/actions/refresh/invoke", {})
    wait_for(lambda: admin.get(f"{R}/{repo['uuid']}").json["synced_at"] != synced)
    assert set(elements_of(admin, repo["uuid"])) == {("legacy", "0.9.0")}


def test_a_driver_refuses_a_spec_of_another_kind():
    from appliance.repo.drivers import DatabaseDriver, NginxDriver
    with pytest.raises(ValueError):
        NginxDriver({"kind": "bootstrap", "manifests_dir": "/tmp"})
    with pytest.raises(ValueError):
        DatabaseDriver({"kind": "nginx", "url": "http://x"})
