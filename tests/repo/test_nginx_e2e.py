"""The Repo Proxy against a real nginx: the nginx driver reading a repository served over
HTTP (with and without basic auth, copy and lazy), and uploads through nginx's
auth_request to the real authorize_upload route (spec 4.3.1)."""

import json
import os
import socket

import pytest
import yaml

from tests.iam.helpers import bind, make_project, make_user
from tests.nginx import Nginx, require_nginx, static_site, upload_site
from tests.secret.conftest import wait_for

from .conftest import (ADMIN_PROJECT, E, R, elements_of, make_repo, manifest, wait_element,
                       wait_repo)
from .test_upload_auth import P1, P2, REFUSED

pytestmark = pytest.mark.usefixtures("nginx_present")


@pytest.fixture(scope="module")
def nginx_present():
    require_nginx("http_dav_module", "http_auth_request_module")


def publish(root, versions_by_name):
    """Lay out a repository as the nginx driver reads it (spec 2.6, 2.7)."""
    elements = {}
    for name, versions in versions_by_name.items():
        for version in versions:
            base = root / name / version
            (base / "manifests").mkdir(parents=True, exist_ok=True)
            (base / "manifests" / f"{name}.yaml").write_text(
                yaml.safe_dump(manifest(name, version)))
            entry = {"name": name, "version": version, "artifacts": ["notes.txt"],
                     "configs": [], "images": [], "manifests": [f"{name}.yaml"],
                     "templates": [], "index": {
                         "artifacts": {"3f1c2e8a-0000-4000-8000-000000000001": "notes.txt"},
                         "configs": {}, "images": {}, "templates": {},
                         "manifests": {"3f1c2e8a-0000-4000-8000-000000000002":
                                       f"{name}.yaml"}}}
            (base / "inventory.json").write_text(json.dumps(entry))
            elements.setdefault(name, {})[version] = entry
    (root / "inventory.json").write_text(json.dumps({"elements": elements}))


@pytest.mark.parametrize("mode", ["copy", "lazy"])
def test_nginx_driver_with_basic_auth(admin, server, tmp_path, mode):
    root = tmp_path / "site"
    root.mkdir()
    publish(root, {"web": ["1.0.0", "1.1.0"]})
    with Nginx(static_site(root, basic_auth=("reader", "s3cret-pass"))) as site:
        anonymous = make_repo(admin, {"kind": "nginx", "url": site.url("/")}, sync_mode=mode)
        refused = wait_repo(admin, anonymous["uuid"], "ERROR")
        assert "401" in refused["status_reason"]
        repo = make_repo(admin, {"kind": "nginx", "url": site.url("/").rstrip("/"),
                                 "username": "reader", "password": "s3cret-pass"},
                         sync_mode=mode)
        wait_repo(admin, repo["uuid"])
        found = elements_of(admin, repo["uuid"])
        assert set(found) == {("web", "1.0.0"), ("web", "1.1.0")}
        element = found[("web", "1.1.0")]
        if mode == "lazy":
            assert element["manifest"] is None
        got = admin.get(f"{E}/{element['uuid']}").json      # lazy: downloaded now
        assert got["manifest"]["name"] == "web" and got["manifest"]["version"] == "1.1.0"
        assert got["inventory"]["index"]["artifacts"] == {
            "3f1c2e8a-0000-4000-8000-000000000001": "notes.txt"}
        artifacts = server.store.collection("repo_artifacts").by("element", element["uuid"])
        assert {a["urn"] for a in artifacts} == {
            "artifacts:3f1c2e8a-0000-4000-8000-000000000001",
            "manifests:3f1c2e8a-0000-4000-8000-000000000002"}
        assert all(a["uri"].startswith(site.url("/").rstrip("/")) for a in artifacts)


def test_nginx_refresh_adds_removes_keeps_installed(admin, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    publish(root, {"svc": ["1.0.0", "1.1.0"]})
    with Nginx(static_site(root)) as site:
        repo = make_repo(admin, {"kind": "nginx", "url": site.url("/")})
        wait_repo(admin, repo["uuid"])
        installed = elements_of(admin, repo["uuid"])[("svc", "1.0.0")]
        assert admin.post(f"{E}/{installed['uuid']}/actions/install/invoke", {}).status == 200
        wait_element(admin, installed["uuid"], "ACTIVE")
        inventory = json.loads((root / "inventory.json").read_text())
        del inventory["elements"]["svc"]["1.0.0"]        # the installed one, gone upstream
        del inventory["elements"]["svc"]["1.1.0"]        # an uninstalled one, gone upstream
        publish(root / "extra", {"svc": ["2.0.0"]})
        inventory["elements"]["svc"]["2.0.0"] = json.loads(
            (root / "extra" / "inventory.json").read_text())["elements"]["svc"]["2.0.0"]
        os.rename(root / "extra" / "svc" / "2.0.0", root / "svc" / "2.0.0")
        (root / "inventory.json").write_text(json.dumps(inventory))
        synced = admin.get(f"{R}/{repo['uuid']}").json["synced_at"]
        admin.post(f"{R}/{repo['uuid']}/actions/refresh/invoke", {})
        wait_for(lambda: admin.get(f"{R}/{repo['uuid']}").json["synced_at"] != synced)
        assert set(elements_of(admin, repo["uuid"])) == {("svc", "1.0.0"), ("svc", "2.0.0")}
        assert admin.post(f"{E}/{installed['uuid']}/actions/uninstall/invoke", {}).status == 200
        wait_element(admin, installed["uuid"], "AVAILABLE")


def raw_request(port, target, method="PUT", token=None, body=b"payload"):
    """Send the request line byte for byte: nothing on the client side re-encodes it."""
    lines = [f"{method} {target} HTTP/1.1", "Host: localhost", "Connection: close",
             f"Content-Length: {len(body)}"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


@pytest.fixture(scope="module")
def upload_world(server, admin, tmp_path_factory):
    project_a, project_b = make_project(admin), make_project(admin)
    owner = make_user(admin)
    bind(admin, owner[0], "owner", project_a)
    reader = make_user(admin)
    bind(admin, reader[0], "reader", project_a)
    shared = wait_repo(admin, make_repo(admin, {"kind": "database"})["uuid"])
    root = tmp_path_factory.mktemp("uploads")
    auth_url = (f"http://127.0.0.1:{server.port}{R}/{shared['uuid']}"
                "/actions/authorize_upload")
    with Nginx(upload_site(root, "elements", auth_url)) as site:
        yield {"a": project_a, "b": project_b, "root": root, "port": site.port,
               "owner": server.login(owner[1], owner[2], scope=f"project:{project_a}"),
               "reader": server.login(reader[1], reader[2], scope=f"project:{project_a}"),
               "admin": admin.token}


def test_upload_through_nginx(upload_world):
    w = upload_world
    path = f"/elements/{w['a']}/app/1.0.0/app.yaml"
    assert raw_request(w["port"], path) == 401                       # no token
    assert raw_request(w["port"], path, token="not-a-token") == 401
    assert raw_request(w["port"], path, token=w["reader"]) == 403    # read only
    assert raw_request(w["port"], path, token=w["owner"]) in (201, 204)
    landed = w["root"] / "elements" / w["a"] / "app" / "1.0.0" / "app.yaml"
    assert landed.read_bytes() == b"payload"
    assert raw_request(w["port"], path, method="GET", token=w["reader"], body=b"") == 200
    assert raw_request(w["port"], path, method="GET", body=b"") == 401
    other = f"/elements/{w['b']}/app/1.0.0/app.yaml"
    assert raw_request(w["port"], other, token=w["owner"]) == 403    # another project
    assert raw_request(w["port"], other, token=w["admin"]) in (201, 204)   # unscoped
    assert raw_request(w["port"], path, method="DELETE", token=w["owner"], body=b"") == 204
    assert not landed.exists()


def test_traversal_corpus_through_nginx_is_refused(upload_world):
    w = upload_world
    before = {p: p.stat().st_mtime_ns for p in w["root"].rglob("*") if p.is_file()}
    # targets in absolute form (http://host/path) reach the authorizer as their path:
    # they are refused only when handed to it raw, which test_upload_auth covers
    corpus = [t.replace(P1, w["a"]).replace(P2, w["b"]) for t in REFUSED if t.startswith("/")]
    assert len(corpus) >= 40
    for target in corpus:
        status = raw_request(w["port"], target, token=w["owner"])
        # refused by our check (403) or by nginx itself before asking (400/404/405)
        assert status in (400, 403, 404, 405), (target, status)
    after = {p: p.stat().st_mtime_ns for p in w["root"].rglob("*") if p.is_file()}
    assert after == before, "a refused request changed a file"


def test_authorize_upload_route_directly(server, admin, upload_world):
    w = upload_world
    shared = admin.get(R, query={"project_id": ADMIN_PROJECT}).json[0]
    route = f"{R}/{shared['uuid']}/actions/authorize_upload"
    headers = {"X-Original-Method": "PUT", "X-Original-URI": f"/elements/{w['a']}/x.yaml"}
    owner = server.client(w["owner"])
    assert owner.get(route, headers=headers).status == 200
    assert owner.get(route, headers={**headers, "X-Original-Method": "POST"}).status == 403
    assert owner.get(f"{R}/00000000-0000-0000-0000-00000000dead/actions/authorize_upload",
                     headers=headers).status == 404
    assert server.client().get(route, headers=headers).status == 401
