"""An LB item's value -> nginx configuration text (pure: no I/O; docs/lb-dataplane.md).

`render_lb(value, listen=...)` gives one LB's `http {}` part, its `stream {}` part and its
secret files (certificates and keys, kept out of the text); `render_main(...)` gives the
one `nginx.conf` of the node's LB instance that includes every LB's parts.

Every string that comes from a user is either checked against a strict form (uuids,
addresses, ports, domain names, header names, methods) or double-quoted with `\\` and `"`
escaped and control characters refused, so no value can end a directive, open a block
or add a line. Where a value is meant literally (a redirect URL), `$` is written as the
variable `${lb_dollar}`, whose value is a literal "$" (nginx has no escape for it).
Header values and rewrite replacements keep nginx variables (`$remote_addr`, `$1`), as
the reference does: they cannot leave their directive either, and an unknown variable
is an `nginx -t` failure, which the driver reports. Anything this module does not know
(an action or modifier kind) is refused, never dropped: dropping an auth_request would
open a route.
"""

import ipaddress
import re
import uuid as uuidlib
from dataclasses import dataclass, field

TLS_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
               "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
               "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# passive health checks: one failed attempt takes an endpoint out for FAIL_TIMEOUT, and
# the request that met it goes on to the next endpoint (proxy_next_upstream)
MAX_FAILS = 1
FAIL_TIMEOUT = "10s"
CONNECT_TIMEOUT = "5s"
NEXT_UPSTREAM = "error timeout http_502 http_503 http_504"
UDP_SESSION_TIMEOUT = "30s"
WORKER_SHUTDOWN_TIMEOUT = "60s"
AUTH_PREFIX = "/_lb_auth/"
AUTO_HEADERS = ("Host", "X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Proto",
                "X-Forwarded-Prefix")
DAV_METHODS = ("PUT", "DELETE")
REDIRECT_WITH_LOCATION = (301, 302, 303, 307, 308)
# the answer of a pool with no endpoint: a server marked down, so nginx says 502
NO_ENDPOINT = "server 127.0.0.1:9 down;"
MIME_TYPES = {
    "text/html": "html htm", "text/css": "css", "text/plain": "txt",
    "application/javascript": "js mjs", "application/json": "json",
    "application/wasm": "wasm", "image/svg+xml": "svg", "image/png": "png",
    "image/jpeg": "jpg jpeg", "image/gif": "gif", "image/x-icon": "ico",
    "font/woff2": "woff2", "application/gzip": "gz", "application/zstd": "zst",
}

HEADER_NAME = re.compile(r"^[A-Za-z0-9!#%&'*+.^_`|~-]{1,100}\Z")
DNS_NAME = re.compile(r"^(?=.{1,253}\.?\Z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})"
                      r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*\.?\Z")
SERVER_NAME = re.compile(r"^(?:_|(?:\*\.)?[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}))\Z")
AUTH_PATH = re.compile(r"^/[A-Za-z0-9._~/-]*\Z")


class RenderError(ValueError):
    """A value this renderer will not put into nginx; the message says which and why."""


@dataclass
class Rendered:
    """One LB: its text inside `http {}` and inside `stream {}` ("" when it has none),
    and its secret files {path relative to the config directory: bytes}."""
    http: str = ""
    stream: str = ""
    files: dict = field(default_factory=dict)


# ---- tokens -------------------------------------------------------------------------------

def quote(value, what="value"):
    """One double-quoted nginx token; variables (`$name`) stay variables."""
    if not isinstance(value, str):
        raise RenderError(f"{what} must be a string, not {type(value).__name__}")
    bad = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7f), None)
    if bad is not None:
        raise RenderError(f"{what} {value!r} holds a control character")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def literal(value, what="value"):
    """A quoted token that nginx reads back as exactly `value`, `$` included."""
    text = quote(value, what)
    return text.replace("$", "${lb_dollar}")


def plain_path(value, what="path"):
    """A quoted file system path: absolute, no `..`, no variable."""
    if not isinstance(value, str) or not value.startswith("/") or ".." in value.split("/") \
            or "$" in value:
        raise RenderError(f"{what} {value!r} must be an absolute path without '..' or '$'")
    return quote(value, what)


def _uuid(value, what):
    try:
        return str(uuidlib.UUID(str(value)))
    except ValueError:
        raise RenderError(f"{what} {value!r} is not a uuid") from None


def lb_uuid(value):
    return _uuid(value, "lb uuid")


def upstream_name(pool):
    return "pool_" + _uuid(pool, "pool").replace("-", "_")


def _port(value, what="port"):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise RenderError(f"{what} {value!r} is not a port number")
    return value


def _network(value, what):
    try:
        return str(ipaddress.ip_network(str(value), strict=False))
    except ValueError:
        raise RenderError(f"{what} {value!r} is not an address or network") from None


def host_port(host, port):
    """`host:port` of an endpoint: an IPv4 or IPv6 address or a DNS name."""
    port = _port(port, f"endpoint port of {host!r}")
    try:
        ip = ipaddress.ip_address(str(host))
    except ValueError:
        if not isinstance(host, str) or not DNS_NAME.match(host):
            raise RenderError(f"endpoint host {host!r} is neither an address nor a "
                              "host name") from None
        return f"{host}:{port}"
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def listen_address(listen, port):
    """The address part of `listen`: all IPv4 addresses when `listen` is empty."""
    port = _port(port)
    if not listen:
        return str(port)
    try:
        ip = ipaddress.ip_address(listen)
    except ValueError:
        raise RenderError(f"listen address {listen!r} is not an IP address") from None
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _lines(block, indent=4):
    pad = " " * indent
    return "".join(f"{pad}{line}\n" if line else "\n" for line in block)


# ---- the pools ----------------------------------------------------------------------------

def render_upstream(pool_uuid, pool, context, keepalive=True):
    """`upstream` of one pool, in `context` "http" or "stream" (zones are per context)."""
    name = upstream_name(pool_uuid)
    if (pool or {}).get("balance", "roundrobin") != "roundrobin":
        raise RenderError(f"pool {pool_uuid}: balance {pool.get('balance')!r} is not "
                          "supported (roundrobin only)")
    servers = []
    for e in (pool or {}).get("endpoints") or []:
        weight = e.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 1000:
            raise RenderError(f"pool {pool_uuid}: weight {weight!r} is not 0..1000")
        address = host_port(e.get("host"), e.get("port"))
        servers.append(f"server {address} down;" if weight == 0 else
                       f"server {address} weight={weight} max_fails={MAX_FAILS} "
                       f"fail_timeout={FAIL_TIMEOUT};")
    body = [f"zone {context}_{name} 64k;"] + (servers or [NO_ENDPOINT])
    if context == "http" and keepalive and servers:
        body.append("keepalive 16;")
    return f"upstream {name} {{\n" + _lines(body) + "}\n"


# ---- http ---------------------------------------------------------------------------------

def _allow(condition):
    ips = condition.get("allowed_ips")
    if ips is None:
        ips = ["0.0.0.0/0"]
    return [f"allow {_network(ip, 'allowed_ips entry')};" for ip in ips] + ["deny all;"]


def _auto_headers(headers, vhost, condition):
    out = []
    for name in headers:
        if name == "Host":
            out.append("proxy_set_header Host $host;")
        elif name == "X-Forwarded-For":
            out.append("proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;")
        elif name == "X-Forwarded-Port":
            out.append(f'proxy_set_header X-Forwarded-Port "{_port(vhost["port"])}";')
        elif name == "X-Forwarded-Proto":
            out.append("proxy_set_header X-Forwarded-Proto $scheme;")
        elif name == "X-Forwarded-Prefix":
            if condition["kind"] != "regex" and condition["value"] != "/":
                out.append("proxy_set_header X-Forwarded-Prefix "
                           f"{literal(condition['value'], 'route value')};")
        else:
            raise RenderError(f"auto_header {name!r} is not one of {', '.join(AUTO_HEADERS)}")
    return out


def _header_name(name):
    if not isinstance(name, str) or not HEADER_NAME.match(name):
        raise RenderError(f"header name {name!r} is not an HTTP token")
    return name


def _modifiers(vhost, route_uuid, condition):
    """(lines inside the location, the auth location's lines or None)."""
    lines, auth = [], None
    for m in condition.get("modifiers") or []:
        kind = m.get("kind")
        if kind == "auto_header":
            lines += _auto_headers(m.get("headers") or [], vhost, condition)
        elif kind == "set_header":
            lines.append(f"proxy_set_header {_header_name(m.get('name'))} "
                         f"{quote(m.get('value', ''), 'header value')};")
        elif kind == "set_resp_header":
            lines.append(f"add_header {_header_name(m.get('name'))} "
                         f"{quote(m.get('value', ''), 'header value')} always;")
        elif kind == "rewrite_url":
            lines.append(f"rewrite {quote(m.get('regex'), 'rewrite regex')} "
                         f"{quote(m.get('replacement'), 'rewrite replacement')} break;")
        elif kind == "auth_request":
            if auth is not None:
                raise RenderError(f"route {route_uuid}: more than one auth_request")
            path = m.get("path")
            if not isinstance(path, str) or not AUTH_PATH.match(path):
                raise RenderError(f"auth_request path {path!r} is not of the form "
                                  "/[A-Za-z0-9._~/-]*")
            location = AUTH_PREFIX + route_uuid
            # nginx answers 500 for a check's status other than 2xx, 401 and 403; the
            # check's 404 (no such repository, spec 4.3.1) must reach the caller as 404
            lines[0:0] = [f"auth_request {location};",
                          "auth_request_set $lb_auth_status $upstream_status;",
                          f"error_page 500 = {location}/failed;"]
            # the check gets a GET with the original method and raw URI, and the
            # caller's headers (Authorization), never the body (spec 4.3.1)
            auth = [f"location = {location} {{", *_lines([
                "internal;",
                f'proxy_pass "http://{upstream_name(m.get("pool"))}{path}";',
                "proxy_method GET;",
                "proxy_pass_request_body off;",
                'proxy_set_header Content-Length "";',
                "proxy_set_header X-Original-Method $request_method;",
                "proxy_set_header X-Original-URI $request_uri;",
                "proxy_http_version 1.1;",
                'proxy_set_header Connection "";',
                f"proxy_connect_timeout {CONNECT_TIMEOUT};",
            ]).splitlines(), "}",
                # the variable is set before nginx fails the request, and kept through
                # the internal redirect (ngx_http_auth_request_module)
                f"location = {location}/failed {{", *_lines([
                    "internal;",
                    'if ($lb_auth_status ~ "404$") {',
                    "    return 404;",
                    "}",
                    "return 500;",
                ]).splitlines(), "}"]
        else:
            raise RenderError(f"route {route_uuid}: modifier kind {kind!r} is not known")
    return lines, auth


def _backend(action, pools):
    pool = action.get("pool")
    name = upstream_name(pool)
    if str(pool) not in pools:
        raise RenderError(f"pool {pool} is named by a route but not given")
    protocol = (action.get("protocol") or {"kind": "http"})
    scheme = protocol.get("kind", "http")
    if scheme not in ("http", "https"):
        raise RenderError(f"backend protocol {scheme!r} is not http or https")
    lines = [f"proxy_pass {scheme}://{name};",
             "proxy_http_version 1.1;",
             "proxy_set_header Upgrade $http_upgrade;",
             "proxy_set_header Connection $lb_connection_upgrade;",
             f"proxy_next_upstream {NEXT_UPSTREAM};",
             f"proxy_connect_timeout {CONNECT_TIMEOUT};"]
    if scheme == "https":
        endpoints = pools[str(pool)].get("endpoints") or []
        hosts = {e.get("host") for e in endpoints}
        named = next(iter(hosts)) if len(hosts) == 1 else None
        try:
            ipaddress.ip_address(str(named))
            named = None
        except ValueError:
            pass
        lines += ["proxy_ssl_server_name on;",
                  f"proxy_ssl_name {named if named and DNS_NAME.match(named) else '$host'};"]
        if protocol.get("verify", True):
            lines += ["proxy_ssl_verify on;",
                      f"proxy_ssl_trusted_certificate {CA_BUNDLE};"]
        else:
            lines.append("proxy_ssl_verify off;")
    return lines


def local_dirs(value):
    """[(path, dav methods)] of every local_dir action of an LB value."""
    return [(a.get("path"), a.get("dav_methods") or [])
            for _, a in _first_actions(value) if a.get("kind") == "local_dir"]


def downloads(value):
    """{route uuid: url} of every local_dir_download action of an LB value."""
    return {_uuid(r.get("uuid"), "route uuid"): a.get("url")
            for r, a in _first_actions(value)
            if a.get("kind") == "local_dir_download"}


def _first_actions(value):
    """(route, the action that serves it) of an LB value's http routes."""
    for v in (value or {}).get("vhosts") or []:
        for r in v.get("routes") or []:
            actions = (r.get("condition") or {}).get("actions") or []
            if actions and isinstance(actions[0], dict):
                yield r, actions[0]


def _action(action, condition, pools, local_root="/", download_dir=None):
    kind = action.get("kind")
    if kind == "backend":
        return _backend(action, pools), True
    if kind == "redirect":
        code = action.get("code", 301)
        if isinstance(code, bool) or not isinstance(code, int) or not 300 <= code <= 399:
            raise RenderError(f"redirect code {code!r} is not 300..399")
        target = literal(action.get("url"), "redirect url")[:-1] + '$request_uri"'
        if code in REDIRECT_WITH_LOCATION:
            return [f"return {code} {target};"], False
        return [f"add_header Location {target} always;", f"return {code};"], False
    if kind == "local_dir_download":
        # served as a read-only local_dir: the directory the driver unpacked it into
        if download_dir is None:
            raise RenderError(f"{action.get('url')!r} has not been downloaded")
        return _action({"kind": "local_dir", "path": download_dir,
                        "is_spa": action.get("is_spa", True)}, condition, pools)
    if kind == "local_dir":
        plain_path(action.get("path"), "local_dir path")
        # a host test's node is a directory: its files are under that root
        path = local_root.rstrip("/") + action["path"]
        methods = action.get("dav_methods") or []
        unknown = [m for m in methods if m not in DAV_METHODS]
        if unknown:
            raise RenderError(f"dav_methods {unknown} are not among {', '.join(DAV_METHODS)}")
        value = condition["value"]
        if condition["kind"] == "regex":
            lines = [f"root {plain_path(path)};"]
        elif condition["kind"] == "exact":
            lines = [f"alias {plain_path(path)};"]
        else:
            lines = [f"alias {plain_path(path.rstrip('/') + '/')};"]
        if methods:
            lines += [f"dav_methods {' '.join(sorted(set(methods)))};",
                      "create_full_put_path on;",
                      "dav_access user:rw group:r all:r;"]
        elif action.get("is_spa", True) and condition["kind"] == "prefix":
            # a missing file is the application's index, so client-side routes load
            index = value.rstrip("/") + "/index.html"
            lines.append(f"try_files $uri $uri/ {literal(index, 'route value')};")
        return lines, False
    raise RenderError(f"action kind {kind!r} is not known")


LOCATION_MATCH = {"prefix": "", "exact": "= ", "regex": "~ "}


def _location(vhost, route, pools, local_root="/", download_dirs=None):
    """(the route's location lines, its auth location lines or None)."""
    route_uuid = _uuid(route.get("uuid"), "route uuid")
    c = route.get("condition") or {}
    kind = c.get("kind")
    if kind not in LOCATION_MATCH:
        raise RenderError(f"route {route_uuid}: condition kind {kind!r} has no place in an "
                          f"{vhost['protocol']} vhost")
    value = c.get("value")
    if kind != "regex" and (not isinstance(value, str) or not value.startswith("/")):
        raise RenderError(f"route {route_uuid}: value {value!r} must start with '/'")
    actions = c.get("actions") or []
    if not actions:
        raise RenderError(f"route {route_uuid}: no action")
    # the first action serves the route, as in the reference
    action_lines, proxied = _action(actions[0], c, pools, local_root,
                                    (download_dirs or {}).get(route_uuid))
    modifier_lines, auth = _modifiers(vhost, route_uuid, c)
    if not proxied:
        # header modifiers only mean something to a proxied request
        modifier_lines = [m for m in modifier_lines if not m.startswith("proxy_set_header")]
    head = f"location {LOCATION_MATCH[kind]}{quote(value, 'route value')} {{"
    body = _allow(c) + modifier_lines + action_lines
    return [head, *_lines(body).splitlines(), "}"], auth


def render_http_vhost(vhost, pools, listen, redirect_port=80, cert_dir="certs",
                      local_root="/", download_dirs=None):
    vh = _uuid(vhost.get("uuid"), "vhost uuid")
    protocol = vhost.get("protocol")
    https = protocol == "https"
    address = listen_address(listen, vhost.get("port"))
    domains = vhost.get("domains") or []
    for d in domains:
        if not isinstance(d, str) or not SERVER_NAME.match(d):
            raise RenderError(f"vhost {vh}: domain {d!r} is not a host name")
    if not domains:
        raise RenderError(f"vhost {vh}: an {protocol} vhost needs a domain")
    names = " ".join(quote(d) for d in domains)
    proxy_from = vhost.get("proxy_protocol_from")
    files = {}
    flags = (" ssl http2" if https else "") + (" proxy_protocol" if proxy_from else "")
    body = [f"listen {address}{flags};", f"server_name {names};", "client_max_body_size 0;"]
    if proxy_from:
        body += [f"set_real_ip_from {_network(proxy_from, 'proxy_protocol_from')};",
                 "real_ip_header proxy_protocol;"]
    if https:
        tls = vhost.get("tls") or {}
        if not isinstance(tls.get("crt"), str) or not isinstance(tls.get("key"), str):
            raise RenderError(f"vhost {vh}: https without a certificate and key")
        crt, key = f"{cert_dir}/{vh}.crt", f"{cert_dir}/{vh}.key"
        files[crt], files[key] = tls["crt"].encode(), tls["key"].encode()
        body += [f"ssl_certificate {crt};", f"ssl_certificate_key {key};",
                 "ssl_protocols TLSv1.2 TLSv1.3;", f"ssl_ciphers {TLS_CIPHERS};",
                 "ssl_prefer_server_ciphers off;"]
    locations, has_root = [], False
    for route in vhost.get("routes") or []:
        loc, auth = _location(vhost, route, pools, local_root, download_dirs)
        c = route["condition"]
        has_root = has_root or (c["kind"] == "prefix" and c["value"] == "/")
        locations += loc + (auth or [])
    if not has_root:
        locations = ["location / {", "    return 404;", "}"] + locations
    text = "server {\n" + _lines(body + locations) + "}\n"
    if https and vhost.get("redirect_http"):
        port = _port(vhost["port"])
        target = "https://$host" + ("" if port == 443 else f":{port}") + "$request_uri"
        text += ("server {\n" + _lines([
            f"listen {listen_address(listen, redirect_port)};",
            f"server_name {names};",
            f'return 301 "{target}";']) + "}\n")
    return text, files


# ---- stream (tcp, udp) ----------------------------------------------------------------------

def render_stream_vhost(vhost, pools, listen):
    vh = _uuid(vhost.get("uuid"), "vhost uuid")
    protocol = vhost.get("protocol")
    routes = vhost.get("routes") or []
    if not routes:
        return ""           # nothing to pass the connections to: not listened on
    if len(routes) > 1:
        raise RenderError(f"vhost {vh}: a {protocol} vhost passes to one route, it has "
                          f"{len(routes)}")
    c = routes[0].get("condition") or {}
    if c.get("kind") != "raw":
        raise RenderError(f"vhost {vh}: a {protocol} vhost takes a raw route, not "
                          f"{c.get('kind')!r}")
    actions = c.get("actions") or []
    if not actions or actions[0].get("kind") != "backend":
        raise RenderError(f"vhost {vh}: a raw route passes to a backend pool")
    pool = actions[0].get("pool")
    if str(pool) not in pools:
        raise RenderError(f"pool {pool} is named by a route but not given")
    proxy_from = vhost.get("proxy_protocol_from")
    if proxy_from and protocol == "udp":
        raise RenderError(f"vhost {vh}: proxy_protocol_from is not for udp")
    flags = (" udp" if protocol == "udp" else "") + (" proxy_protocol" if proxy_from else "")
    body = [f"listen {listen_address(listen, vhost.get('port'))}{flags};"]
    if proxy_from:
        body.append(f"set_real_ip_from {_network(proxy_from, 'proxy_protocol_from')};")
    body += _allow(c) + [f"proxy_pass {upstream_name(pool)};",
                         f"proxy_connect_timeout {CONNECT_TIMEOUT};"]
    if protocol == "udp":
        body.append(f"proxy_timeout {UDP_SESSION_TIMEOUT};")
    return "server {\n" + _lines(body) + "}\n"


# ---- one LB, and the instance --------------------------------------------------------------

def _pools_named(vhosts, l4):
    named = set()
    for v in vhosts:
        if (v.get("protocol") in ("tcp", "udp")) != l4:
            continue
        for r in v.get("routes") or []:
            c = r.get("condition") or {}
            for a in c.get("actions") or []:
                if a.get("kind") == "backend":
                    named.add(str(a.get("pool")))
            for m in c.get("modifiers") or []:
                if m.get("kind") == "auth_request":
                    named.add(str(m.get("pool")))
    return named


def render_lb(value, listen=None, redirect_port=80, local_root="/", download_dirs=None):
    """One LB item's value (docs/lb-dataplane.md) -> Rendered; RenderError names what
    cannot be rendered (nothing of the LB is then shipped). `local_root` prefixes
    local_dir paths (a test node's root); `download_dirs` {route uuid: absolute real
    directory} is where each local_dir_download route's archive was unpacked."""
    if not isinstance(value, dict):
        raise RenderError("the item has no value")
    lb = _uuid(value.get("lb"), "lb uuid")
    pools = {str(k): v for k, v in (value.get("pools") or {}).items()}
    vhosts = value.get("vhosts") or []
    http, stream, files = [], [], {}
    for v in vhosts:
        protocol = v.get("protocol")
        if protocol in ("http", "https"):
            text, vhost_files = render_http_vhost(v, pools, listen, redirect_port,
                                                  cert_dir=f"certs/{lb}",
                                                  local_root=local_root,
                                                  download_dirs=download_dirs)
            http.append(text)
            files.update(vhost_files)
        elif protocol in ("tcp", "udp"):
            stream.append(render_stream_vhost(v, pools, listen))
        else:
            raise RenderError(f"vhost {v.get('uuid')}: protocol {protocol!r} is not known")
    head = f"# LB {lb} (appliance/lb/nginx.py)\n"
    for l4, parts in ((False, http), (True, stream)):
        for pool in sorted(_pools_named(vhosts, l4)):
            if pool not in pools:
                raise RenderError(f"pool {pool} is named by a route but not given")
            parts.insert(0, render_upstream(pool, pools[pool], "stream" if l4 else "http"))
    return Rendered(http=head + "".join(http) if http else "",
                    stream=head + "".join(p for p in stream if p) if any(stream) else "",
                    files=files)


def render_main(http_files, stream_files, *, prefix, user=None, modules=(),
                worker_processes="auto", status_socket=None):
    """The instance's nginx.conf: includes (paths relative to the config's own
    directory), run files under `prefix` (absolute), `user` for the workers (None: the
    nginx default), `modules` to load (the stream module where it is dynamic), and
    `status_socket`: a unix socket serving only nginx's stub_status, which the agent reads
    for the metrics (docs/metrics-infra.md); on no address, so nothing off the node and no
    LB's listen can reach it."""
    plain_path(prefix, "prefix")
    run = prefix.rstrip("/")

    def p(*parts):
        return quote("/".join([run, *parts]))
    out = ["# the node's LB instance, written by the agent (appliance/lb/node.py)"]
    out += [f"load_module {plain_path(m, 'module')};" for m in modules]
    if user:
        if not re.fullmatch(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", user):
            raise RenderError(f"worker user {user!r} is not a user name")
        out.append(f"user {user};")
    out += [f"worker_processes {worker_processes};",
            f"pid {p('nginx.pid')};",
            f"error_log {p('logs', 'error.log')} notice;",
            # old workers of a reload close long-lived streams (websockets, tcp, udp
            # sessions) after this; other connections finish long before
            f"worker_shutdown_timeout {WORKER_SHUTDOWN_TIMEOUT};",
            "events { worker_connections 4096; }",
            "http {"]
    types = [f"{t} {ext};" for t, ext in sorted(MIME_TYPES.items())]
    out += _lines([
        "access_log off;",
        f"client_body_temp_path {p('temp', 'client_body')};",
        f"proxy_temp_path {p('temp', 'proxy')};",
        f"fastcgi_temp_path {p('temp', 'fastcgi')};",
        f"uwsgi_temp_path {p('temp', 'uwsgi')};",
        f"scgi_temp_path {p('temp', 'scgi')};",
        "types {", *_lines(types).splitlines(), "}",
        "default_type application/octet-stream;",
        "sendfile on;",
        "server_tokens off;",
        "server_names_hash_bucket_size 128;",
        "ssl_session_cache shared:lb_tls:10m;",
        "ssl_session_timeout 10m;",
        # websockets pass through (Upgrade), other requests keep the upstream
        # connection alive (an empty Connection header)
        "map $http_upgrade $lb_connection_upgrade {",
        "    default upgrade;",
        '    "" "";',
        "}",
        # a literal "$" for values meant literally (see literal())
        "geo $lb_dollar {",
        '    default "$";',
        "}",
        *_status_server(status_socket),
        *[f"include {quote(f)};" for f in http_files],
    ]).splitlines()
    out.append("}")
    if stream_files:
        out.append("stream {")
        out += _lines([f"include {quote(f)};" for f in stream_files]).splitlines()
        out.append("}")
    return "\n".join(out) + "\n"


def _status_server(socket_path):
    if socket_path is None:
        return []
    plain_path(socket_path, "status socket")
    if re.search(r"[\s;{}\"'\\]", socket_path):
        raise RenderError(f"status socket {socket_path!r} must be a plain path")
    return ["server {",
            f"    listen unix:{socket_path};",
            "    access_log off;",
            "    location = /stub_status { stub_status; }",
            "    location / { return 404; }",
            "}"]
