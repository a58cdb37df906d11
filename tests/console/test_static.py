"""The console's files as the API serves them (docs/console.md, "Server side"): the
security headers on every answer, the page revalidated by ETag with the tree's hash written
into it, immutable caching only under that hash, nothing outside the folder, and GET /
sending browsers (only) to the console."""

import http.client
import os
import re

import pytest

from .helpers import assert_security_headers

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif," \
                 "image/webp,*/*;q=0.8"


def raw_get(server, path, headers=None):
    """A request line sent as written: http.client sends the path unchanged (no `..`
    folding, no re-encoding), as an attacker's client would."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def version_of(page):
    found = re.search(rb'js/main\.js\?v=([0-9a-f]+)"', page)
    assert found, page
    return found.group(1).decode()


def test_the_page_carries_the_tree_hash_and_revalidates(server):
    client = server.client()
    resp = client.get("/console/")
    assert resp.status == 200, resp
    assert resp.header("content-type") == "text/html; charset=utf-8"
    assert resp.header("cache-control") == "no-cache"
    assert_security_headers(resp)
    assert b"{{v}}" not in resp.raw
    version = version_of(resp.raw)
    assert re.fullmatch(r"[0-9a-f]{16}", version)
    assert f'href="app.css?v={version}"'.encode() in resp.raw
    etag = resp.header("etag")
    assert etag and etag.startswith('"')
    again = client.get("/console/", headers={"If-None-Match": etag})
    assert again.status == 304 and again.raw == b""
    assert again.header("etag") == etag
    assert_security_headers(again)
    # a weak or listed validator matches too; another does not
    assert client.get("/console/", headers={"If-None-Match": f'"x", W/{etag}'}).status == 304
    assert client.get("/console/", headers={"If-None-Match": '"other"'}).status == 200


def test_console_without_its_slash_is_sent_to_it(server):
    # the page's relative names (js/main.js) resolve against /console/, not /
    resp = server.client().get("/console")
    assert resp.status == 302, resp
    assert resp.header("location") == "/console/"
    assert_security_headers(resp)


def test_a_file_is_immutable_only_under_the_current_hash(server):
    client = server.client()
    version = version_of(client.get("/console/").raw)
    hashed = client.get(f"/console/js/main.js?v={version}")
    assert hashed.status == 200, hashed
    assert hashed.header("content-type") == "text/javascript; charset=utf-8"
    assert hashed.header("cache-control") == "public, max-age=31536000, immutable"
    assert_security_headers(hashed)
    # the module main.js imports by relative name, and a stale hash: revalidated by ETag
    for path in ("/console/js/show.js", "/console/js/main.js?v=0000000000000000"):
        resp = client.get(path)
        assert resp.status == 200, resp
        assert resp.header("cache-control") == "no-cache"
        assert_security_headers(resp)
        etag = resp.header("etag")
        not_modified = client.get(path, headers={"If-None-Match": etag})
        assert not_modified.status == 304 and not_modified.raw == b""
        assert_security_headers(not_modified)
    css = client.get("/console/app.css")
    assert css.header("content-type") == "text/css; charset=utf-8"


def test_a_changed_file_changes_the_hash_and_its_etag(server, console_dir):
    client = server.client()
    page = client.get("/console/")
    before = client.get("/console/js/show.js")
    path = os.path.join(console_dir, "js", "show.js")
    with open(path) as f:
        original = f.read()
    try:
        with open(path, "w") as f:
            f.write(original + "// changed\n")
        after = client.get("/console/js/show.js")
        assert after.header("etag") != before.header("etag")
        assert after.raw.endswith(b"// changed\n")
        new_page = client.get("/console/", headers={"If-None-Match": page.header("etag")})
        assert new_page.status == 200
        assert version_of(new_page.raw) != version_of(page.raw)
    finally:
        with open(path, "w") as f:
            f.write(original)


@pytest.fixture(scope="module")
def outside(console_dir, tmp_path_factory):
    """A secret file beside the console's folder, a symbolic link to it inside the folder,
    and a hidden file inside: none may be served."""
    secret = tmp_path_factory.mktemp("outside") / "secret.txt"
    secret.write_text("not for the console\n")
    os.symlink(str(secret), os.path.join(console_dir, "link.txt"))
    with open(os.path.join(console_dir, ".hidden"), "w") as f:
        f.write("hidden\n")
    return str(secret)


@pytest.mark.parametrize("path", [
    "/console/../v1/health",
    "/console/%2e%2e/%2e%2e/etc/passwd",
    "/console/js/%2E%2E/%2E%2E/etc/passwd",
    "/console/js/..%2f..%2fetc%2fpasswd",
    "/console//etc/passwd",
    "/console/%2Fetc%2Fpasswd",
    "/console/index.html%00.js",
    "/console/js%00/main.js",
    "/console/js%5cmain.js",
    "/console/./index.html",
    "/console/link.txt",
    "/console/.hidden",
    "/console/js",
    "/console/missing.js",
])
def test_nothing_outside_the_folder_is_served(server, outside, path):
    status, headers, body = raw_get(server, path)
    assert status == 404, (path, status, body)
    assert b"not for the console" not in body and b"root:" not in body
    assert b"hidden" not in body or b"no such console file" in body
    if path.startswith("/console/") and "/../" not in path:
        assert headers["content-security-policy"].startswith("default-src 'none'")
        assert headers["content-type"] == "application/json"


def test_the_console_answers_404_with_no_files(tmp_path):
    from tests.apiserver import ApiServer
    from tests.conftest import ADMIN_PASSWORD
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD,
                    console_static_dir=str(tmp_path / "empty")).start()
    try:
        resp = srv.client().get("/console/")
        assert resp.status == 404, resp
        assert "console_static_dir" in resp.json["message"]
        assert resp.json["type"] == "NotFound"
        assert_security_headers(resp)
    finally:
        srv.stop()


@pytest.mark.parametrize("accept", [None, "*/*", "application/json",
                                    "application/json, text/html",
                                    "text/html;q=0.5, application/json"])
def test_root_is_json_for_api_clients(server, accept):
    headers = {"Accept": accept} if accept else {}
    resp = server.client().get("/", headers=headers)
    assert resp.status == 200, resp
    assert resp.json["name"] == "appliance"


@pytest.mark.parametrize("accept", [BROWSER_ACCEPT, "text/html",
                                    "text/html, application/json;q=0.9"])
def test_root_sends_a_browser_to_the_console(server, accept):
    resp = server.client().get("/", headers={"Accept": accept})
    assert resp.status == 302, resp
    assert resp.header("location") == "/console/"
    assert "Accept" in resp.header("vary")


def test_head_and_concurrent_loads(server):
    """HEAD answers as GET without a body; many loads at once all answer whole (the tree's
    digests are shared between request threads)."""
    import threading
    head = server.client().request("HEAD", "/console/")
    assert head.status == 200 and head.raw == b""
    assert_security_headers(head)
    statuses, lock = [], threading.Lock()

    def load():
        for path in ("/console/", "/console/js/main.js", "/console/app.css"):
            resp = server.client().get(path)
            with lock:
                statuses.append((resp.status, path, len(resp.raw) > 0))

    threads = [threading.Thread(target=load) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(statuses) == 36
    assert all(status == 200 and whole for status, _, whole in statuses), statuses
