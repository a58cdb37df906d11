"""Test harness: a real nginx on a loopback port, in a throw-away prefix.

    from tests.nginx import Nginx, static_site, upload_site, require_nginx

    require_nginx()                                    # loud skip when there is no binary
    with Nginx(upload_site(root, "elements", auth_url)) as ngx:
        conn = http.client.HTTPConnection("127.0.0.1", ngx.port)
        ...

`Nginx` writes `nginx.conf` into its prefix (a temp directory unless given) with the pid
file, the error and access logs and every temp path inside it, starts
`nginx -c CONF -p PREFIX` with `daemon off;` on a free 127.0.0.1 port, waits until the
port accepts, and stops it with SIGQUIT (graceful), then SIGKILL to its process group.
nginx runs in a session of its own, so the SIGKILL fallback also takes its workers.

A *site* is what goes inside `server { ... }` besides `listen`: a string, or a callable
`site(prefix) -> str` that may write helper files (an htpasswd) into the prefix first.
The builders `static_site` and `upload_site` return such callables.

Running as root, the workers are told to run as root too (`user root root;`), since the
directories of a test (pytest's tmp_path is 0700) are not readable by `nobody`.
"""

import base64
import grp
import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse

from tests import processes
from tests import ports

NGINX_BINARIES = ("nginx", "/usr/sbin/nginx")
INSTALL_HINT = "apt-get install -y --no-install-recommends nginx"


def nginx_binary():
    for name in NGINX_BINARIES:
        path = shutil.which(name)
        if path:
            return path
    return None


def nginx_available():
    """True when an nginx binary is on PATH (or in /usr/sbin)."""
    return nginx_binary() is not None


def nginx_info():
    """`(version, configure arguments)` of the nginx binary, from `nginx -V`."""
    out = subprocess.run([nginx_binary(), "-V"], capture_output=True, text=True,
                         timeout=10).stderr
    version = out.split("nginx/", 1)[1].split()[0] if "nginx/" in out else "unknown"
    args = out.split("configure arguments:", 1)[1] if "configure arguments:" in out else ""
    return version, args


def has_module(name):
    """Whether nginx was built with `--with-<name>` (e.g. http_dav_module)."""
    return f"--with-{name}" in nginx_info()[1]


SKIP_REASON = ("\n" + "!" * 78 + "\n"
               "!!! nginx is NOT INSTALLED: the nginx tests are SKIPPED, nothing was proven.\n"
               f"!!! Install it: {INSTALL_HINT}\n"
               "!!! (`make test` as root installs it when nginx is in the Makefile's "
               "DEBIAN_PACKAGES)\n"
               + "!" * 78)


def require_nginx(*modules):
    """Skip the calling test loudly when nginx (or one of `modules`) is missing.

    Set APPLIANCE_REQUIRE_NGINX=1 (CI) to turn the skip into a failure.
    """
    import pytest

    missing = None
    if not nginx_available():
        missing = SKIP_REASON
    else:
        absent = [m for m in modules if not has_module(m)]
        if absent:
            missing = f"nginx lacks {', '.join(absent)} (see `nginx -V`)"
    if missing:
        if os.environ.get("APPLIANCE_REQUIRE_NGINX") == "1":
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)


free_port = ports.free_port


def quote(value):
    """One nginx config token for a path or URL, double-quoted.

    `$` would be read as a variable by directives that take them (root, proxy_pass), and
    control characters have no business in a test path: both are refused.
    """
    value = str(value)
    if "$" in value or any(ord(c) < 0x20 or ord(c) == 0x7f for c in value):
        raise ValueError(f"not usable in an nginx config: {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def htpasswd_sha(user, password):
    """One htpasswd line with the `{SHA}` scheme (base64 of SHA-1) that nginx understands."""
    if ":" in user or "\n" in user:
        raise ValueError("user names hold no ':' or newline")
    digest = base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
    return f"{user}:{{SHA}}{digest}\n"


class NginxError(RuntimeError):
    pass


class Nginx:
    """One nginx master (plus a worker) serving `site` on 127.0.0.1:`port`."""

    def __init__(self, site, prefix=None, port=None, start_timeout=10.0, stop_timeout=10.0,
                 http_context="", main_context="", worker_connections=128):
        self.site = site
        # for a site that needs more than `server { }`: http-level lines (a limit_req_zone),
        # main-level lines (worker_rlimit_nofile), and room for many connections
        self.http_context = http_context
        self.main_context = main_context
        self.worker_connections = worker_connections
        self._own_prefix = prefix is None
        self.prefix = os.path.abspath(prefix or tempfile.mkdtemp(prefix="nginx-test-"))
        self.port = port
        self._fixed_port = port is not None
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc = None
        self.conf_path = os.path.join(self.prefix, "nginx.conf")
        self.error_log_path = os.path.join(self.prefix, "logs", "error.log")
        self.access_log_path = os.path.join(self.prefix, "logs", "access.log")
        self.stderr_path = os.path.join(self.prefix, "logs", "stderr.log")

    # ---- addresses ----------------------------------------------------------------------

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def url(self, path="/"):
        return self.base_url + path

    # ---- config -------------------------------------------------------------------------

    def _site_text(self):
        return self.site(self.prefix) if callable(self.site) else str(self.site)

    def render_config(self):
        p = self.prefix
        temp = {name: os.path.join(p, "temp", name)
                for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
        for path in temp.values():
            os.makedirs(path, exist_ok=True)
        os.makedirs(os.path.join(p, "logs"), exist_ok=True)
        user = ""
        if os.geteuid() == 0:
            user = (f"user {pwd.getpwuid(os.geteuid()).pw_name} "
                    f"{grp.getgrgid(os.getegid()).gr_name};\n")
        site = self._site_text()
        return (
            f"# written by tests/nginx.py\n"
            f"daemon off;\n"
            f"master_process on;\n"
            f"worker_processes 1;\n"
            f"{user}"
            f"pid {quote(os.path.join(p, 'nginx.pid'))};\n"
            f"error_log {quote(self.error_log_path)} info;\n"
            f"{self.main_context}"
            f"events {{ worker_connections {int(self.worker_connections)}; }}\n"
            f"http {{\n"
            + "".join(f"    {line}\n" for line in self.http_context.splitlines()) +
            f"    server_tokens off;\n"
            f"    access_log {quote(self.access_log_path)};\n"
            f"    client_body_temp_path {quote(temp['client_body'])};\n"
            f"    proxy_temp_path {quote(temp['proxy'])};\n"
            f"    fastcgi_temp_path {quote(temp['fastcgi'])};\n"
            f"    uwsgi_temp_path {quote(temp['uwsgi'])};\n"
            f"    scgi_temp_path {quote(temp['scgi'])};\n"
            f"    default_type application/octet-stream;\n"
            f"    sendfile on;\n"
            f"    server {{\n"
            f"        listen 127.0.0.1:{self.port};\n"
            f"        server_name localhost;\n"
            + "".join(f"        {line}\n" if line.strip() else "\n"
                      for line in site.splitlines())
            + "    }\n"
            "}\n")

    def write_config(self):
        text = self.render_config()
        with open(self.conf_path, "w") as f:
            f.write(text)
        return text

    def check_config(self):
        """`nginx -t` on the written config; raises NginxError with its output."""
        res = subprocess.run([nginx_binary(), "-t", "-q", "-c", self.conf_path,
                              "-p", self.prefix + "/"], capture_output=True, text=True,
                             timeout=30)
        if res.returncode != 0:
            raise NginxError(f"nginx -t failed:\n{res.stderr}{res.stdout}")

    # ---- life cycle ---------------------------------------------------------------------

    def start(self):
        if nginx_binary() is None:
            raise NginxError(f"nginx is not installed ({INSTALL_HINT})")
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            if not self._fixed_port:
                self.port = free_port()
            self.write_config()
            self.check_config()
            try:
                self._spawn()
                return self
            except NginxError as exc:
                if "Address already in use" in str(exc) and attempt + 1 < attempts:
                    continue
                raise

    def _spawn(self):
        stderr = open(self.stderr_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [nginx_binary(), "-c", self.conf_path, "-p", self.prefix + "/"],
                stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                start_new_session=True)
        finally:
            stderr.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                logs = self.logs()
                self.proc = None
                raise NginxError(f"nginx exited at start:\n{logs}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        logs = self.logs()
        self._kill()
        raise NginxError(f"nginx did not answer on port {self.port} within "
                         f"{self.start_timeout} s:\n{logs}")

    def stop(self):
        """SIGQUIT (graceful shutdown), wait; SIGKILL the process group as a fallback."""
        if self.proc is not None:
            processes.stop(self.proc, self.stop_timeout, signal.SIGQUIT, group=True)
        self.proc = None

    def _kill(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # its own session: master and workers
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def cleanup(self):
        self.stop()
        if self._own_prefix:
            shutil.rmtree(self.prefix, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc):
        self.cleanup()

    # ---- logs ---------------------------------------------------------------------------

    def _read(self, path):
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def error_log(self):
        return self._read(self.error_log_path)

    def access_log(self):
        return self._read(self.access_log_path)

    def logs(self):
        return (f"--- {self.stderr_path}\n{self._read(self.stderr_path)}"
                f"--- {self.error_log_path}\n{self.error_log()}")


# ---- sites ----------------------------------------------------------------------------------

def static_site(root_dir, basic_auth=None):
    """Serve `root_dir` read-only (GET and HEAD; anything else 403), optionally behind
    basic auth: `basic_auth=(user, password)`, kept as a `{SHA}` htpasswd in the prefix."""
    root_dir = os.path.abspath(root_dir)

    def render(prefix):
        lines = ["location / {",
                 f"    root {quote(root_dir)};",
                 "    autoindex off;",
                 "    limit_except GET { deny all; }"]
        if basic_auth is not None:
            user, password = basic_auth
            path = os.path.join(prefix, "htpasswd")
            with open(path, "w") as f:
                f.write(htpasswd_sha(user, password))
            lines += ['    auth_basic "restricted";',
                      f"    auth_basic_user_file {quote(path)};"]
        lines.append("}")
        return "\n".join(lines)

    return render


AUTH_LOCATION = "/_authorize_upload"


def upload_site_config(root_dir, prefix, auth_url, max_body="32m"):
    """The server-block text of `upload_site`, for documentation and for other harnesses."""
    if not prefix or "/" in prefix or not all(c.isalnum() or c in "-_." for c in prefix):
        raise ValueError(f"prefix must be one plain path segment: {prefix!r}")
    parsed = urllib.parse.urlsplit(auth_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"auth_url must be an absolute http(s) URL: {auth_url!r}")
    return "\n".join([
        f"location /{prefix}/ {{",
        f"    root {quote(os.path.abspath(root_dir))};",
        "    autoindex off;",
        "    dav_methods PUT DELETE;",
        "    create_full_put_path on;",
        "    dav_access user:rw group:r all:r;",
        f"    client_max_body_size {max_body};",
        f"    auth_request {AUTH_LOCATION};",
        "}",
        f"location = {AUTH_LOCATION} {{",
        "    internal;",
        f"    proxy_pass {quote(auth_url)};",
        "    proxy_method GET;",
        "    proxy_pass_request_body off;",
        '    proxy_set_header Content-Length "";',
        "    proxy_set_header X-Original-Method $request_method;",
        "    proxy_set_header X-Original-URI $request_uri;",
        "    proxy_set_header Authorization $http_authorization;",
        "}",
    ])


def upload_site(root_dir, prefix, auth_url):
    """A writable `/<prefix>/` (PUT and DELETE through nginx's DAV module, parent directories
    created on PUT) under `root_dir`, so files land in `root_dir/<prefix>/<project>/...`;
    every request first goes by `auth_request` to an internal location that sends a GET to
    `auth_url` (the authorize_upload action) with X-Original-Method, the raw
    X-Original-URI ($request_uri) and the caller's Authorization header, without the body.

    nginx lets the request through on a 2xx answer, answers 401/403 as given, and turns any
    other answer (a 404 for a missing repository, a 500) into 500.
    """
    text = upload_site_config(root_dir, prefix, auth_url)
    return lambda _prefix: text
