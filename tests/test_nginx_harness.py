"""Proof that tests/nginx.py runs a real nginx that does what the upload wiring relies on.

The authorizer here is a stand-in: a tiny Bottle app on a real Waitress server that says 200
to `Authorization: Bearer ok`, 401 otherwise, and records the X-Original-* headers nginx sends.
The real `authorize_upload` route (spec 4.3.1, appliance.repo.upload_auth) is tested end to
end in tests/repo by another engineer, using this harness with a real API server.

The tests skip loudly when nginx is missing (APPLIANCE_REQUIRE_NGINX=1 makes that a failure);
`make test` as root installs it once nginx is in the Makefile's DEBIAN_PACKAGES.
"""

import base64
import http.client
import os
import socket

import bottle
import pytest

from tests.wsgiserver import LoopbackServer
from tests.nginx import (Nginx, NginxError, htpasswd_sha, nginx_info, quote, require_nginx,
                         static_site, upload_site)

PROJECT = "11111111-2222-4333-8444-555555555555"
OTHER = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
REPO = "00000000-0000-0000-0000-0000000000aa"


@pytest.fixture(autouse=True)
def _nginx():
    require_nginx("http_dav_module", "http_auth_request_module")


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=False, skip_accept_encoding=True)
        hdrs = dict(headers or {})
        if body is not None:
            hdrs.setdefault("Content-Length", str(len(body)))
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def raw_request(port, request_line, headers=()):
    """Send a request line byte for byte, so that nothing on the client side re-encodes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        lines = [request_line, "Host: localhost", *headers, "Connection: close", "", ""]
        s.sendall("\r\n".join(lines).encode("latin-1"))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


# ---- the stand-in authorizer ------------------------------------------------------------

def bearer_ok(env):
    """The stand-in's policy: 200 for `Authorization: Bearer ok`, else 401."""
    return 200 if env.get("HTTP_AUTHORIZATION") == "Bearer ok" else 401


class Authorizer:
    def __init__(self, policy=bearer_ok):
        self.calls = []
        app = bottle.Bottle()
        path = f"/v1/repo/repositories/{REPO}/actions/authorize_upload"

        @app.route(path, method=["GET", "HEAD", "PUT", "DELETE", "POST"])
        def authorize():
            env = bottle.request.environ
            self.calls.append({
                "method": bottle.request.method,
                "path": env.get("PATH_INFO"),
                "x_method": env.get("HTTP_X_ORIGINAL_METHOD"),
                "x_uri": env.get("HTTP_X_ORIGINAL_URI"),
                "authorization": env.get("HTTP_AUTHORIZATION"),
                "content_length": env.get("CONTENT_LENGTH"),
                "body": bottle.request.body.read(),
            })
            status = policy(env)
            bottle.response.status = status
            if status == 401:
                bottle.response.set_header("WWW-Authenticate", "Bearer")
            return ""

        self.server = LoopbackServer(app, threads=2)
        self.port = self.server.port
        self.url = f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop()


@pytest.fixture(scope="module")
def upload(tmp_path_factory):
    root = tmp_path_factory.mktemp("upload-root")
    with Authorizer() as auth, Nginx(upload_site(root, "elements", auth.url)) as ngx:
        yield ngx, auth, root


OK = {"Authorization": "Bearer ok"}


# ---- harness basics -------------------------------------------------------------------

def test_nginx_version_and_modules_are_reported():
    version, args = nginx_info()
    assert version != "unknown"
    assert "--with-http_dav_module" in args and "--with-http_auth_request_module" in args


def test_everything_lives_in_the_prefix(tmp_path):
    (tmp_path / "www").mkdir()
    ngx = Nginx(static_site(tmp_path / "www"), prefix=str(tmp_path / "prefix"))
    with ngx:
        conf = open(ngx.conf_path).read()
        pid = int(open(os.path.join(ngx.prefix, "nginx.pid")).read())
        assert pid == ngx.proc.pid
        proc = ngx.proc
    assert "daemon off;" in conf
    for directive in ("pid", "error_log", "access_log", "client_body_temp_path",
                      "proxy_temp_path", "fastcgi_temp_path", "uwsgi_temp_path",
                      "scgi_temp_path"):
        line = next(ln for ln in conf.splitlines() if ln.strip().startswith(directive + " "))
        assert str(tmp_path / "prefix") in line, line
    assert "listen 127.0.0.1:" in conf
    assert proc.poll() is not None          # stopped on exit
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", ngx.port), timeout=1).close()


def test_a_broken_config_fails_loudly(tmp_path):
    with pytest.raises(NginxError) as err:
        with Nginx("no_such_directive on;"):
            pass
    assert "no_such_directive" in str(err.value)


def test_stop_is_idempotent_and_prefix_is_removed(tmp_path):
    ngx = Nginx(static_site(tmp_path)).start()
    prefix = ngx.prefix
    ngx.stop()
    ngx.stop()
    ngx.cleanup()
    assert not os.path.exists(prefix)


def test_quote_refuses_variables():
    assert quote('/a b/"c"') == '"/a b/\\"c\\""'
    with pytest.raises(ValueError):
        quote("/tmp/$uri")


# ---- static site ----------------------------------------------------------------------

def test_static_site_serves_a_file_read_only(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.b.tar.gz").write_bytes(b"payload")
    with Nginx(static_site(tmp_path)) as ngx:
        status, headers, body = request(ngx.port, "GET", "/dir/a.b.tar.gz")
        assert (status, body) == (200, b"payload")
        status, headers, body = request(ngx.port, "HEAD", "/dir/a.b.tar.gz")
        assert status == 200 and headers["content-length"] == "7"
        assert request(ngx.port, "GET", "/dir/missing")[0] == 404
        assert request(ngx.port, "PUT", "/dir/new", body=b"x")[0] == 403
        assert request(ngx.port, "DELETE", "/dir/a.b.tar.gz")[0] == 403
        assert not (tmp_path / "dir" / "new").exists()
        assert (tmp_path / "dir" / "a.b.tar.gz").exists()
        assert "GET /dir/a.b.tar.gz" in ngx.access_log()


def test_static_site_basic_auth(tmp_path):
    (tmp_path / "f.txt").write_bytes(b"secret file")
    with Nginx(static_site(tmp_path, basic_auth=("alice", "s3cret pass"))) as ngx:
        status, headers, _ = request(ngx.port, "GET", "/f.txt")
        assert status == 401 and headers["www-authenticate"].startswith("Basic")
        good = base64.b64encode(b"alice:s3cret pass").decode()
        status, _, body = request(ngx.port, "GET", "/f.txt",
                                  headers={"Authorization": f"Basic {good}"})
        assert (status, body) == (200, b"secret file")
        bad = base64.b64encode(b"alice:wrong").decode()
        assert request(ngx.port, "GET", "/f.txt",
                       headers={"Authorization": f"Basic {bad}"})[0] == 401
        htpasswd = open(os.path.join(ngx.prefix, "htpasswd")).read()
        assert htpasswd == htpasswd_sha("alice", "s3cret pass")
        assert htpasswd.startswith("alice:{SHA}") and "s3cret" not in htpasswd


# ---- upload site behind auth_request ---------------------------------------------------

def test_upload_put_lands_on_disk(upload):
    ngx, auth, root = upload
    path = f"/elements/{PROJECT}/mysql/1.0.0/mysql-1.0.0.tar.gz"
    auth.calls.clear()
    status, _, _ = request(ngx.port, "PUT", path, body=b"tarball bytes", headers=OK)
    assert status in (201, 204)
    target = root / "elements" / PROJECT / "mysql" / "1.0.0" / "mysql-1.0.0.tar.gz"
    assert target.read_bytes() == b"tarball bytes"       # parents created on the way
    (call,) = auth.calls
    assert call["method"] == "GET"                        # proxy_method GET
    assert call["path"] == f"/v1/repo/repositories/{REPO}/actions/authorize_upload"
    assert call["x_method"] == "PUT"
    assert call["x_uri"] == path
    assert call["authorization"] == "Bearer ok"
    assert call["body"] == b""                            # the upload never reaches the API
    assert call["content_length"] in (None, "", "0")

    status, _, body = request(ngx.port, "GET", path, headers=OK)
    assert (status, body) == (200, b"tarball bytes")
    assert auth.calls[-1]["x_method"] == "GET"
    assert request(ngx.port, "HEAD", path, headers=OK)[0] == 200
    assert auth.calls[-1]["x_method"] == "HEAD"
    assert auth.calls[-1]["method"] == "GET"

    status, _, _ = request(ngx.port, "DELETE", path, headers=OK)
    assert status == 204
    assert not target.exists()
    assert auth.calls[-1]["x_method"] == "DELETE"


def test_upload_refused_without_the_header(upload):
    ngx, auth, root = upload
    path = f"/elements/{PROJECT}/refused.tar.gz"
    auth.calls.clear()
    status, headers, _ = request(ngx.port, "PUT", path, body=b"nope")
    assert status == 401
    assert headers.get("www-authenticate") == "Bearer"   # passed through by auth_request
    assert not (root / "elements" / PROJECT / "refused.tar.gz").exists()
    assert auth.calls[-1]["authorization"] is None
    assert request(ngx.port, "PUT", path, body=b"nope",
                   headers={"Authorization": "Bearer wrong"})[0] == 401
    assert request(ngx.port, "GET", path)[0] == 401
    assert not (root / "elements" / PROJECT / "refused.tar.gz").exists()


def test_x_original_uri_is_raw(upload):
    ngx, auth, root = upload
    raw = f"/elements/{PROJECT}/%2e%2e/{OTHER}/x.tar.gz?v=%2e%2e"
    auth.calls.clear()
    status = raw_request(ngx.port, f"PUT {raw} HTTP/1.1",
                         ["Authorization: Bearer wrong", "Content-Length: 0"])
    assert status == 401
    assert auth.calls, "nginx never asked the authorizer"
    assert auth.calls[-1]["x_uri"] == raw                 # %2e%2e stays encoded, query kept
    assert auth.calls[-1]["x_method"] == "PUT"

    # and the reason it matters: nginx itself decodes and resolves the same URI
    auth.calls.clear()
    (root / "elements" / OTHER).mkdir(parents=True, exist_ok=True)
    (root / "elements" / OTHER / "peek.txt").write_bytes(b"other project's file")
    raw = f"/elements/{PROJECT}/%2e%2e/{OTHER}/peek.txt"
    status, _, body = request(ngx.port, "GET", raw, headers=OK)
    assert auth.calls[-1]["x_uri"] == raw
    assert (status, body) == (200, b"other project's file")   # what upload_auth must refuse


@pytest.mark.parametrize("raw", [
    "/elements/{p}/%252e%252e/x",
    "/elements/{p}/a%2fb",
    "/elements/{p}/a%5cb",
    "/elements/{p}//x",
    "/elements/{p}/./x",
    "/elements//{p}/x",
])
def test_other_raw_forms_reach_the_authorizer_unchanged(upload, raw):
    ngx, auth, _ = upload
    raw = raw.format(p=PROJECT)
    auth.calls.clear()
    status = raw_request(ngx.port, f"GET {raw} HTTP/1.1")
    assert status == 401
    assert auth.calls[-1]["x_uri"] == raw


# ---- nginx + the real decision, with a stand-in for token checking -----------------------

UPLOADER = "Bearer uploader-of-project"


def decide_policy(env):
    """appliance.repo.upload_auth.decide behind nginx; one fake token, scoped to PROJECT."""
    from appliance.iam.permissions import Principal
    from appliance.repo.upload_auth import decide

    who = None
    if env.get("HTTP_AUTHORIZATION") == UPLOADER:
        who = Principal({"uuid": "u"}, PROJECT,
                        ["repo.repository.upload", "repo.repository.read"])
    status, _reason = decide(env.get("HTTP_X_ORIGINAL_METHOD"),
                             env.get("HTTP_X_ORIGINAL_URI"), who,
                             "00000000-0000-0000-0000-000000000000")
    return status


def test_decide_behind_nginx_never_lets_a_traversal_through(tmp_path):
    """Every corpus path that nginx itself accepts is refused by decide, and nothing is
    written outside the token's project directory; a plain upload still works."""
    from tests.repo.test_upload_auth import REFUSED

    root = tmp_path / "root"
    (root / "elements" / OTHER).mkdir(parents=True)
    (root / "elements" / OTHER / "x").write_bytes(b"other project's file")
    before = sorted(p for p in root.rglob("*"))
    mine = f"/elements/{PROJECT}"
    corpus = [u.replace("/elements/11111111-2222-4333-8444-555555555555", mine)
              for u in REFUSED if u.startswith("/")]
    seen = 0
    with Authorizer(decide_policy) as auth, \
            Nginx(upload_site(root, "elements", auth.url)) as ngx:
        for uri in corpus:
            for method in ("PUT", "GET", "DELETE"):
                auth.calls.clear()
                headers = [f"Authorization: {UPLOADER}", "Content-Length: 0"]
                status = raw_request(ngx.port, f"{method} {uri} HTTP/1.1", headers)
                if auth.calls:
                    seen += 1
                    assert auth.calls[-1]["x_uri"] == uri
                    assert status == 403, (method, uri, status)
                else:
                    # nginx refused it (400), or normalized it out of /elements/ (404, 405)
                    assert status in (400, 404, 405), (method, uri, status)
        assert sorted(p for p in root.rglob("*")) == before
        assert (root / "elements" / OTHER / "x").read_bytes() == b"other project's file"
        status, _, _ = request(ngx.port, "PUT", f"{mine}/ok/a.b.tar.gz", body=b"fine",
                               headers={"Authorization": UPLOADER})
        assert status == 201
        assert (root / "elements" / PROJECT / "ok" / "a.b.tar.gz").read_bytes() == b"fine"
        assert request(ngx.port, "PUT", f"/elements/{OTHER}/y", body=b"no",
                       headers={"Authorization": UPLOADER})[0] == 403
    assert seen > len(corpus)          # most of the corpus does reach the authorizer


def test_auth_request_turns_other_statuses_into_500(tmp_path):
    """nginx passes 401/403 through and makes anything else (404 for a missing repository)
    a 500: worth knowing when reading the API's e2e results."""
    answers = {"Bearer 403": 403, "Bearer 404": 404}
    with Authorizer(lambda env: answers.get(env.get("HTTP_AUTHORIZATION"), 401)) as auth, \
            Nginx(upload_site(tmp_path, "elements", auth.url)) as ngx:
        path = f"/elements/{PROJECT}/x"
        assert request(ngx.port, "GET", path, headers={"Authorization": "Bearer 403"})[0] == 403
        assert request(ngx.port, "GET", path, headers={"Authorization": "Bearer 404"})[0] == 500
