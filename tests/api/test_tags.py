"""`tags` on every resource of ours that the reference tags (its models with ModelWithTags:
secrets, passwords, SSH and RSA keys, permissions, DNS domains and records, values, repo
elements): a list of strings, null when unset, filterable ("contains"), writable."""

import uuid

import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.repo.conftest import make_repo, manifest, wait_repo
from tests.secret.conftest import DaemonProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """With the builder, which makes repositories ACTIVE (uploads need one)."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    builder = DaemonProcess("builder", srv.settings["state_dir"]).start()
    yield srv
    builder.stop()
    srv.stop()


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def domain(admin):
    return created(admin.post("/v1/dns/domains", {"name": f"{unique('t')}.test",
                                                  "project_id": ADMIN_PROJECT}))


def selector_variable(admin):
    return created(admin.post("/v1/vs/variables", {"name": unique("v").replace("-", "_"),
                                                   "project_id": ADMIN_PROJECT,
                                                   "setter": {"kind": "selector"}}))


# collection -> (the collection path, a body of a new record), made against the live server
KINDS = {
    "secret": lambda a: ("/v1/secret/secrets", {
        "name": unique("s"), "project_id": ADMIN_PROJECT, "constructor": {"kind": "plain"}}),
    "password": lambda a: ("/v1/secret/passwords", {
        "name": unique("p"), "project_id": ADMIN_PROJECT}),
    "ssh_key": lambda a: ("/v1/secret/ssh_keys", {
        "name": unique("k"), "project_id": ADMIN_PROJECT}),
    "rsa_key": lambda a: ("/v1/secret/rsa_keys", {
        "name": unique("r"), "project_id": ADMIN_PROJECT}),
    "permission": lambda a: ("/v1/iam/permissions", {
        "name": f"tagged.p{uuid.uuid4().hex[:8]}.read"}),
    "domain": lambda a: ("/v1/dns/domains", {
        "name": f"{unique('d')}.test", "project_id": ADMIN_PROJECT}),
    "record": lambda a: (f"/v1/dns/domains/{domain(a)['uuid']}/records", {
        "type": "A", "record": {"kind": "A", "name": "www", "address": "10.0.0.1"}}),
    "value": lambda a: ("/v1/vs/values", {
        "name": unique("val"), "project_id": ADMIN_PROJECT,
        "variable": selector_variable(a)["uuid"], "value": 42}),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_tags_are_stored_shown_filtered_and_replaced(admin, kind):
    path, body = KINDS[kind](admin)
    tag = unique("team")
    untagged = created(admin.post(path, body))
    assert untagged["tags"] is None
    path2, body2 = KINDS[kind](admin)
    tagged = created(admin.post(path2, {**body2, "tags": [tag, "prod"]}))
    assert tagged["tags"] == [tag, "prod"]
    assert admin.get(f"{path2}/{tagged['uuid']}").json["tags"] == [tag, "prod"]
    assert [r["uuid"] for r in admin.get(path2, query={"tags": tag}).json] == [tagged["uuid"]]
    replaced = admin.put(f"{path2}/{tagged['uuid']}", {"tags": ["other"]})
    assert replaced.status == 200 and replaced.json["tags"] == ["other"]
    assert admin.get(path2, query={"tags": tag}).json == []
    cleared = admin.put(f"{path2}/{tagged['uuid']}", {"tags": []})
    assert cleared.status == 200 and cleared.json["tags"] == []


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("tags,word", [
    ("prod", "must be a list"), ([1], "must be a string"), ([None], "must be a string"),
    (["x" * 256], "at most 255"), ([f"t{i}" for i in range(65)], "at most 64"),
    ({"a": "b"}, "must be a list")])
def test_bad_tags_are_400_and_change_nothing(admin, kind, tags, word):
    path, body = KINDS[kind](admin)
    before = admin.get(path).json
    resp = admin.post(path, {**body, "tags": tags})
    assert resp.status == 400 and "tags" in resp.json["message"], resp
    assert word in resp.json["message"], resp.json["message"]
    assert admin.get(path).json == before


def test_repo_elements_take_tags_and_nothing_else_by_put(admin):
    repo = wait_repo(admin, make_repo(admin, {"kind": "database"})["uuid"])
    element = admin.post(f"/v1/repo/repositories/{repo['uuid']}/actions/upload/invoke", {
        "element_name": "tagged", "element_version": "1.0.0",
        "manifest": manifest("tagged", "1.0.0")}).json
    assert element["tags"] is None
    path = f"/v1/repo/elements/{element['uuid']}"
    resp = admin.put(path, {"tags": ["stable"]})
    assert resp.status == 200 and resp.json["tags"] == ["stable"]
    assert resp.json["status"] == element["status"]            # nothing else moved
    assert [e["uuid"] for e in admin.get("/v1/repo/elements",
                                         query={"tags": "stable"}).json] == [element["uuid"]]
    assert admin.put(path, {"version": "2.0.0"}).status == 403
    assert admin.put(path, {"tags": "stable"}).status == 400
    assert admin.get(path).json["tags"] == ["stable"]
