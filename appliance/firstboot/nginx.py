"""The nginx site of the image, rendered at every boot (an upgrade replaces the root, and
with it /etc/nginx): HTTPS on 443 in front of the API's plain HTTP on 127.0.0.1, at `/`,
under `/api/core/` (where the reference CLI's realms point) and under `/api/dbaas/`.
nginx listens on nothing else: plain HTTP stays on loopback, served by the API itself.

nginx is also what stands between a flood and the API (issue 25, docs/security.md,
"Floods"): every client reaches the API through it, so the API sees one address
(127.0.0.1), and the per-client limits are nginx's: header, body, keep-alive and send
timeouts, at most LIMIT_CONN requests in progress and LIMIT_RATE per second (with a burst)
per client address, answered 429 with Retry-After past them. The worker limits (how many
connections nginx may hold at all) are in the image's /etc/nginx/nginx.conf
(image-build/files/appliance/etc/nginx/nginx.conf)."""

import os

from appliance.files import write_file

SITE_FILE = "appliance"
# Debian's default site listens on port 80 on every address
DEBIAN_DEFAULT_SITE = "default"
PREFIXES = ("/api/core/", "/api/dbaas/")

# per client address (docs/security.md, "Floods"): requests in progress at once (a node's
# agent holds one long poll; a CLI or a browser a handful), and a rate with a burst that a
# CLI's or a UI's page of requests never reaches
LIMIT_CONN = 64
LIMIT_RATE = "100r/s"
LIMIT_BURST = 200
# seconds: the whole request header (nginx's timer is not reset by each trickled byte),
# between two reads of a body and two writes of an answer, and an idle keep-alive
HEADER_TIMEOUT = 10
BODY_TIMEOUT = 30
SEND_TIMEOUT = 30
KEEPALIVE_TIMEOUT = 15
TOO_MANY = ('{"type": "TooManyRequests", "code": 429, "message": "too many requests from '
            'this address: retry after the seconds in Retry-After"}')


def _quote(value):
    value = str(value)
    if any(c in value for c in '"$\\') or any(ord(c) < 0x20 for c in value):
        raise ValueError(f"not usable in the nginx config: {value!r}")
    return f'"{value}"'


def http_context():
    """What the site needs at http level (outside `server { }`): the per-address zones."""
    return ("limit_conn_zone $binary_remote_addr zone=appliance_conn:10m;\n"
            f"limit_req_zone $binary_remote_addr zone=appliance_req:10m rate={LIMIT_RATE};\n")


def server_body(cert_path, key_path, upstream, max_body_bytes):
    """What goes inside `server { }` besides `listen`: TLS and the proxied locations.
    `upstream` is host:port of the API's plain HTTP."""
    host, _, port = upstream.rpartition(":")
    if not host or not port.isdigit() or any(c in host for c in ' ;{}"$'):
        raise ValueError(f"upstream must be host:port, not {upstream!r}")
    proxy = [
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        "proxy_set_header Host $host;",
        "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        "proxy_set_header X-Forwarded-Proto https;",
        # long requests (a build, an upload) are the API's to time out, not nginx's
        "proxy_read_timeout 300s;",
        "proxy_send_timeout 300s;",
    ]
    lines = [
        f"ssl_certificate {_quote(cert_path)};",
        f"ssl_certificate_key {_quote(key_path)};",
        "ssl_protocols TLSv1.2 TLSv1.3;",
        "ssl_prefer_server_ciphers off;",
        "ssl_session_cache shared:appliance_tls:1m;",
        "ssl_session_timeout 1h;",
        # the API enforces its own, smaller limits per route with a JSON error body
        f"client_max_body_size {int(max_body_bytes)};",
        "proxy_request_buffering off;",
        *proxy,
        # floods: a client holds a connection only while it sends and reads in time
        f"client_header_timeout {HEADER_TIMEOUT}s;",
        f"client_body_timeout {BODY_TIMEOUT}s;",
        f"send_timeout {SEND_TIMEOUT}s;",
        f"keepalive_timeout {KEEPALIVE_TIMEOUT}s;",
        f"limit_conn appliance_conn {LIMIT_CONN};",
        f"limit_req zone=appliance_req burst={LIMIT_BURST} nodelay;",
        "limit_conn_status 429;",
        "limit_req_status 429;",
        # the API's own 429s (login throttling) pass through unchanged: nginx replaces only
        # its own errors (proxy_intercept_errors is off)
        "error_page 429 @too_many_requests;",
        "location @too_many_requests {",
        "    default_type application/json;",
        "    add_header Retry-After 1 always;",
        f"    return 429 '{TOO_MANY}';",
        "}",
    ]
    for prefix in PREFIXES:
        # the trailing slash of proxy_pass replaces the prefix: /api/core/v1/x -> /v1/x
        lines += [f"location {prefix} {{", f"    proxy_pass http://{upstream}/;", "}"]
    # compressed: the console's files and the public OpenAPI document (~700 kB of JSON
    # that each console load reads), which hold no secret; the API's other answers stay
    # uncompressed (a secret beside reflected input is what a compression attack reads)
    for exact, types in (("/console/", "text/css text/javascript application/json"),
                         ("= /v1/openapi.json", "application/json")):
        lines += [f"location {exact} {{", "    gzip on;", f"    gzip_types {types};",
                  f"    proxy_pass http://{upstream};", "}"]
    lines += ["location / {", f"    proxy_pass http://{upstream};", "}"]
    return "\n".join(lines) + "\n"


def site(cert_path, key_path, upstream, max_body_bytes, listen=("443 ssl",)):
    """The whole site file: the zones, and one HTTPS server."""
    body = "".join(f"    {line}\n" for line in
                   server_body(cert_path, key_path, upstream, max_body_bytes).splitlines())
    listens = "".join(f"    listen {item};\n" for item in listen)
    return ("# written at every boot by appliance-firstboot.service (appliance/firstboot):\n"
            "# edits are lost\n"
            + http_context() +
            "server {\n" + listens + "    server_name _;\n" + body + "}\n")


def write(sites_dir, text):
    """Write the site and drop Debian's default one. Returns the site's path."""
    path = os.path.join(sites_dir, SITE_FILE)
    write_file(os.path.abspath(path), text, 0o644)
    try:
        os.unlink(os.path.join(sites_dir, DEBIAN_DEFAULT_SITE))
    except FileNotFoundError:
        pass
    return path
