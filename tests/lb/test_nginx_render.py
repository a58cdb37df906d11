"""appliance/lb/nginx.py: what it renders, what it refuses, and that no user string can
leave its directive (checked against a real nginx: hostile values arrive verbatim)."""

import os

import pytest

from appliance.lb import nginx
from appliance.lb.nginx import RenderError, render_lb, render_main
from appliance.tenancy.addresses import PLATFORM
from tests.lb.nginxnode import (backends, get, lb_value, new_uuid, node, pool, route,  # noqa: F401
                                vhost)


def one_route(**condition):
    p = new_uuid()
    r = route("prefix", "/", p)
    r["condition"].update(condition)
    return lb_value([vhost("http", 8080, [r])], {p: pool(9001)}), p


def test_listen_address_and_default_location():
    value, _ = one_route()
    text = render_lb(value).http
    assert "listen 8080;" in text                  # no setting: every address
    assert "listen 127.0.0.7:8080;" in render_lb(value, listen="127.0.0.7").http
    assert "location / {\n        return 404;" not in text    # "/" is the route's
    value["vhosts"][0]["routes"][0]["condition"]["value"] = "/x/"
    assert "location / {\n        return 404;" in render_lb(value).http
    with pytest.raises(RenderError, match="listen address"):
        render_lb(value, listen="0.0.0.0; evil")


def test_passive_health_checks_and_an_empty_pool():
    p, empty = new_uuid(), new_uuid()
    value = lb_value([vhost("http", 80, [route("prefix", "/", p),
                                          route("prefix", "/e/", empty)])],
                     {p: pool(9001, 9002), empty: {"balance": "roundrobin", "endpoints": []}})
    text = render_lb(value).http
    assert "server 127.0.0.1:9001 weight=1 max_fails=1 fail_timeout=10s;" in text
    assert "proxy_next_upstream error timeout http_502 http_503 http_504;" in text
    assert nginx.NO_ENDPOINT in text


@pytest.mark.parametrize("condition, message", [
    ({"modifiers": [{"kind": "no_such_modifier"}]}, "modifier kind"),
    ({"modifiers": [{"kind": "auth_request", "pool": "P", "path": "/a b"}]},
     "auth_request path"),
    ({"modifiers": [{"kind": "auth_request", "pool": "P", "path": "/a"},
                    {"kind": "auth_request", "pool": "P", "path": "/b"}]},
     "more than one auth_request"),
    ({"modifiers": [{"kind": "set_header", "name": "X A", "value": "v"}]}, "header name"),
    ({"modifiers": [{"kind": "set_header", "name": "X-A", "value": "a\r\nB: c"}]},
     "control character"),
    ({"modifiers": [{"kind": "auto_header", "headers": ["Cookie"]}]}, "auto_header"),
    ({"actions": [{"kind": "teleport"}]}, "action kind"),
    ({"actions": [{"kind": "local_dir", "path": "/var/www/../etc"}]}, "local_dir path"),
    ({"actions": [{"kind": "local_dir", "path": "/var/www/$x"}]}, "local_dir path"),
    ({"actions": [{"kind": "local_dir", "path": "/var/www/a", "dav_methods": ["MOVE"]}]},
     "dav_methods"),
    ({"actions": [{"kind": "local_dir_download", "url": "https://x/a.tar.gz"}]},
     "has not been downloaded"),
    ({"actions": [{"kind": "redirect", "url": "https://x", "code": 200}]}, "redirect code"),
    ({"actions": [{"kind": "backend", "pool": new_uuid()}]}, "not given"),
    ({"allowed_ips": ["10.0.0.0/8; allow all"]}, "allowed_ips"),
    ({"kind": "raw"}, "has no place"),
    ({"value": "no-slash"}, "must start with '/'"),
])
def test_what_is_refused(condition, message):
    value, p = one_route()
    for m in condition.get("modifiers", []):
        if m.get("pool") == "P":
            m["pool"] = p
    value["vhosts"][0]["routes"][0]["condition"].update(condition)
    with pytest.raises(RenderError, match=message):
        render_lb(value)


@pytest.mark.parametrize("field, bad, message", [
    ("domains", ["a.test; listen 81"], "domain"),
    ("domains", ["~^(.*)$"], "domain"),
    ("domains", [], "needs a domain"),
    ("port", "80", "port"),
    ("proxy_protocol_from", "10.0.0.0/8;", "proxy_protocol_from"),
    ("protocol", "gopher", "protocol"),
])
def test_vhost_fields_refused(field, bad, message):
    value, _ = one_route()
    value["vhosts"][0][field] = bad
    with pytest.raises(RenderError, match=message):
        render_lb(value)


def test_endpoints_refused():
    value, p = one_route()
    for host in ("127.0.0.1;", "a b", "evil.test:80 backup", ""):
        value["pools"][p]["endpoints"] = [{"host": host, "port": 80, "weight": 1}]
        with pytest.raises(RenderError, match="endpoint host"):
            render_lb(value)
    value["pools"][p]["endpoints"] = [{"host": "::1", "port": 80, "weight": 1}]
    assert "server [::1]:80 " in render_lb(value).http
    value["pools"][p]["endpoints"] = [{"host": "backend.test", "port": 80, "weight": 1001}]
    with pytest.raises(RenderError, match="weight"):
        render_lb(value)


def test_l4_rules():
    p = new_uuid()
    two = lb_value([vhost("tcp", 9000, [route("raw", pool_uuid=p), route("raw", pool_uuid=p)])],
                   {p: pool(1)})
    with pytest.raises(RenderError, match="one route"):
        render_lb(two)
    udp = lb_value([vhost("udp", 9000, [route("raw", pool_uuid=p)],
                          proxy_protocol_from="10.0.0.0/8")], {p: pool(1)})
    with pytest.raises(RenderError, match="not for udp"):
        render_lb(udp)
    prefix = lb_value([vhost("tcp", 9000, [route("prefix", "/", p)])], {p: pool(1)})
    with pytest.raises(RenderError, match="raw route"):
        render_lb(prefix)
    tcp = lb_value([vhost("tcp", 9000, [route("raw", pool_uuid=p)],
                          proxy_protocol_from="10.1.2.3/8")], {p: pool(1)})
    stream = render_lb(tcp).stream
    assert "listen 9000 proxy_protocol;" in stream
    assert "set_real_ip_from 10.0.0.0/8;" in stream
    assert render_lb(tcp).http == ""


def test_main_config():
    text = render_main(["lb-a.http.conf"], [], prefix="/var/lib/appliance/lb",
                       user="www-data", modules=["/usr/lib/nginx/modules/x.so"])
    assert 'load_module "/usr/lib/nginx/modules/x.so";' in text
    assert 'include "lb-a.http.conf";' in text
    assert "stream {" not in text
    assert 'pid "/var/lib/appliance/lb/nginx.pid";' in text
    with pytest.raises(RenderError):
        render_main([], [], prefix="/var/lib/a", user="www-data; daemon off")


# hostile strings: each must reach the backend (or the client) exactly as given
HOSTILE = ['plain', 'a"; proxy_pass http://127.0.0.1:1; #', "} location / { return 200; }",
           "back\\slash\\", 'quote" at end"', "#comment", "semi;colon", "{brace",
           "'single'", "\\\"", "tab-free but ünïcode", "$$dollar", "trailing\\"]


def test_hostile_values_arrive_verbatim_through_real_nginx(node, backends):
    echo = backends("echo")
    p = new_uuid()
    port = node.port()
    routes = []
    for i, text in enumerate(HOSTILE):
        literal = text.replace("$", "")      # header values keep nginx variables
        routes.append(route("prefix", f"/h{i}/", p, modifiers=[
            {"kind": "set_header", "name": "X-Value", "value": literal},
            {"kind": "set_resp_header", "name": "X-Back", "value": literal}]))
        routes.append(route("exact", f"/r{i}" + text.replace("$", "").replace(" ", "-")
                            .replace("#", "").replace("\\", "").replace("?", ""),
                            actions=[{"kind": "redirect", "url": f"https://x.test/{text}",
                                      "code": 302}]))
    value = lb_value([vhost("http", port, routes)], {p: pool(echo.port)})
    result = node.apply(value)
    assert result["status"] == "ACTIVE", result
    for i, text in enumerate(HOSTILE):
        literal = text.replace("$", "")
        status, headers, _ = get(node.address, port, f"/h{i}/")
        assert status == 200
        assert echo.requests[-1]["HTTP_X_VALUE"].encode("latin-1").decode() == literal
        assert headers["x-back"].encode("latin-1").decode() == literal
    # a redirect URL is literal: "$" included, and the request URI is appended
    status, headers, _ = get(node.address, port, "/r11" + "dollar")
    assert (status, headers["location"]) == (302, "https://x.test/$$dollar/r11dollar")
    # and nothing else got in: one location per route plus the default
    conf = open(os.path.join(node.driver.live_generation(),
                             f"lb-{value['lb']}.http.conf")).read()
    assert conf.count("\n    location ") == len(routes) + 1


def test_a_writable_local_dir(node, backends):
    port = node.port()
    value = lb_value([vhost("http", port, [
        route("prefix", "/files/", actions=[{"kind": "local_dir", "path": "/var/www/files",
                                              "dav_methods": ["PUT", "DELETE"]}]),
        route("prefix", "/site/", actions=[{"kind": "local_dir", "path": "/var/www/site",
                                             "is_spa": True}]),
    ])], {})
    site = node.base / "root" / "var" / "www" / "site"
    site.mkdir(parents=True)
    (site / "index.html").write_text("the app")
    result = node.apply(value)
    assert result["status"] == "ACTIVE", result
    assert get(node.address, port, "/files/a/b.txt", method="PUT", body=b"data")[0] == 201
    assert (node.base / "root" / "var/www/files/a/b.txt").read_bytes() == b"data"
    assert get(node.address, port, "/files/a/b.txt")[2] == b"data"
    assert get(node.address, port, "/files/a/b.txt", method="DELETE")[0] == 204
    assert get(node.address, port, "/site/deep/link")[2] == b"the app"     # is_spa
    assert get(node.address, port, "/site/index.html")[1]["content-type"] == "text/html"


def tar_gz(files, links=()):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


class Archives:
    """A Waitress server of archives by path."""

    def __init__(self):
        from tests.wsgiserver import LoopbackServer
        self.files = {}
        self.gets = []
        self.server = LoopbackServer(self.app).start()

    def app(self, environ, start_response):
        path = environ["PATH_INFO"]
        self.gets.append(path)
        data = self.files.get(path)
        start_response("200 OK" if data else "404 Not Found", [])
        return [data or b""]

    def url(self, path):
        return f"http://127.0.0.1:{self.server.port}{path}"


def test_local_dir_download(node):
    archives = Archives()
    try:
        archives.files["/v1.tar.gz"] = tar_gz({"./index.html": b"v1 app",
                                               "./js/app.js": b"code"})
        archives.files["/v2.tar.gz"] = tar_gz({"index.html": b"v2 app"})
        archives.files["/evil.tar.gz"] = tar_gz({"../../escape": b"x"})
        archives.files["/link.tar.gz"] = tar_gz({"a": b"x"}, links=[("b", "/etc/shadow")])
        port = node.port()
        r = route("prefix", "/app/", actions=[{"kind": "local_dir_download",
                                               "url": archives.url("/v1.tar.gz"),
                                               "is_spa": True}])
        value = lb_value([vhost("http", port, [r])], {})
        # the archives are on loopback: a platform LB's rule (tests/tenancy: a project's)
        value["reach"] = PLATFORM.as_dict()
        result = node.apply(value)
        assert result["status"] == "ACTIVE", result
        assert get(node.address, port, "/app/js/app.js")[2] == b"code"
        assert get(node.address, port, "/app/some/client/route")[2] == b"v1 app"
        # the same URL again: not fetched again
        value["vhosts"][0]["routes"][0]["condition"]["modifiers"] = []
        assert node.apply(value)["status"] == "ACTIVE"
        assert archives.gets.count("/v1.tar.gz") == 1

        action = r["condition"]["actions"][0]
        for bad, why in (("/evil.tar.gz", "leaves the directory"), ("/link.tar.gz", "links"),
                         ("/missing.tar.gz", "404")):
            action["url"] = archives.url(bad)
            result = node.apply(value)
            assert result["status"] == "ERROR" and why in result["reason"], result
            assert get(node.address, port, "/app/")[2] == b"v1 app"   # the old one serves
        assert not os.path.exists(node.base / "escape")

        action["url"] = archives.url("/v2.tar.gz")
        assert node.apply(value)["status"] == "ACTIVE"
        assert get(node.address, port, "/app/")[2] == b"v2 app"
        downloads = node.file(f"/var/lib/appliance/lb/downloads/{value['lb']}")
        assert len(os.listdir(downloads)) == 1          # v1's directory is gone

        from tests.lb.nginxnode import item
        node.driver.remove(item(value))
        assert not os.path.exists(downloads)
    finally:
        archives.server.stop()
