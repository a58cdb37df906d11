"""The nginx site of the image, rendered at every boot (an upgrade replaces the root, and
with it /etc/nginx): HTTPS on 443 in front of the API's plain HTTP on 127.0.0.1, at `/`,
under `/api/core/` (where the reference CLI's realms point) and under `/api/dbaas/`.
nginx listens on nothing else: plain HTTP stays on loopback, served by the API itself."""

import os

from appliance.files import write_atomically

SITE_FILE = "appliance"
# Debian's default site listens on port 80 on every address
DEBIAN_DEFAULT_SITE = "default"
PREFIXES = ("/api/core/", "/api/dbaas/")


def _quote(value):
    value = str(value)
    if any(c in value for c in '"$\\') or any(ord(c) < 0x20 for c in value):
        raise ValueError(f"not usable in the nginx config: {value!r}")
    return f'"{value}"'


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
    ]
    for prefix in PREFIXES:
        # the trailing slash of proxy_pass replaces the prefix: /api/core/v1/x -> /v1/x
        lines += [f"location {prefix} {{", f"    proxy_pass http://{upstream}/;", "}"]
    lines += ["location / {", f"    proxy_pass http://{upstream};", "}"]
    return "\n".join(lines) + "\n"


def site(cert_path, key_path, upstream, max_body_bytes, listen=("443 ssl",)):
    """The whole site file: one HTTPS server."""
    body = "".join(f"    {line}\n" for line in
                   server_body(cert_path, key_path, upstream, max_body_bytes).splitlines())
    listens = "".join(f"    listen {item};\n" for item in listen)
    return ("# written at every boot by appliance-firstboot.service (appliance/firstboot):\n"
            "# edits are lost\n"
            "server {\n" + listens + "    server_name _;\n" + body + "}\n")


def write(sites_dir, text):
    """Write the site and drop Debian's default one. Returns the site's path."""
    path = os.path.join(sites_dir, SITE_FILE)
    write_atomically(path, text, 0o644, dir_mode=0o755)
    try:
        os.unlink(os.path.join(sites_dir, DEBIAN_DEFAULT_SITE))
    except FileNotFoundError:
        pass
    return path
