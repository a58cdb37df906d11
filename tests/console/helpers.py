"""A browser's side of the console's session, without a browser: requests that carry the
cookies the server set, and the CSRF header a page would send (docs/console.md)."""

import http.client
import json

from tests.apiserver import Response

SESSION = "/console/session"
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; font-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def assert_security_headers(resp):
    for name, value in SECURITY_HEADERS.items():
        assert resp.header(name) == value, (name, resp.headers)


def parse_set_cookie(value):
    """(name, value, {attribute lowercased: value or True})."""
    first, *attrs = [p.strip() for p in value.split(";")]
    name, _, val = first.partition("=")
    parsed = {}
    for attr in attrs:
        key, sep, v = attr.partition("=")
        parsed[key.lower()] = v if sep else True
    return name, val, parsed


class Browser:
    """A cookie jar and the requests a console page makes: every Set-Cookie kept (Max-Age=0
    removes), the X-CSRF-Token header on writes when `csrf` is true."""

    def __init__(self, server, headers=None):
        self.host, self.port = server.host, server.port
        self.jar = {}
        self.headers = headers or {}
        self.last_cookies = {}
        self.source = None          # a loopback address to connect from (127.0.0.2, ...)

    def request(self, method, path, body=None, *, headers=None, csrf=True, raw=None):
        hdrs = {**self.headers, **(headers or {})}
        if self.jar:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.jar.items())
        if csrf and method not in ("GET", "HEAD") and "appliance_csrf" in self.jar:
            hdrs.setdefault("X-CSRF-Token", self.jar["appliance_csrf"])
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPConnection(
            self.host, self.port, timeout=60,
            source_address=(self.source, 0) if self.source else None)
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw_headers = resp.getheaders()
            out = Response(resp.status, {k.lower(): v for k, v in raw_headers}, resp.read())
        finally:
            conn.close()
        self.last_cookies = {}
        for k, v in raw_headers:
            if k.lower() == "set-cookie":
                name, value, attrs = parse_set_cookie(v)
                self.last_cookies[name] = (value, attrs)
                if attrs.get("max-age") == "0":
                    self.jar.pop(name, None)
                else:
                    self.jar[name] = value
        return out

    def login(self, username, password, project=None):
        body = {"username": username, "password": password}
        if project is not None:
            body["project"] = project
        return self.request("POST", SESSION, body)
