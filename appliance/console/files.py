"""The console's files, served by the API process itself under /console/ (docs/console.md,
"Server side").

Why here and not by nginx alone: `make run` has no nginx, and one server for both keeps the
console on the API's origin (its cookies, its CSP 'self'). Why these caching rules: the
page (index.html) is revalidated on every load, so a new version of the appliance shows at
once; the files it names with `?v=<hash of the whole tree>` never change under that name,
so the browser keeps them a year without asking; the modules they import by relative name
are revalidated by ETag (a 304 costs a round trip, not the bytes).
"""

import hashlib
import os
import threading

import bottle

from appliance.api.errors import NotFound
from appliance.api.etags import etag_matches
from appliance.api.routing import PUBLIC, Reply

# docs/security.md, "Web console": why each
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; font-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
INDEX = "index.html"
VERSION_MARK = b"{{v}}"
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
_TEXT = "; charset=utf-8"
CONTENT_TYPES = {
    ".html": "text/html" + _TEXT, ".js": "text/javascript" + _TEXT,
    ".mjs": "text/javascript" + _TEXT, ".css": "text/css" + _TEXT,
    ".json": "application/json", ".map": "application/json",
    ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
    ".woff2": "font/woff2", ".woff": "font/woff", ".txt": "text/plain" + _TEXT,
}
DEFAULT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


def static_dir(settings):
    return os.path.realpath(settings.get("console_static_dir") or DEFAULT_DIR)


def content_type(name):
    return CONTENT_TYPES.get(os.path.splitext(name)[1].lower(), "application/octet-stream")


class Tree:
    """The files under one folder: their digests kept by (inode, size, mtime), and the
    tree's hash, which changes when any file does (the `{{v}}` of index.html)."""

    def __init__(self, root):
        self.root = root
        self._digests = {}          # real path -> ((ino, size, mtime_ns), digest)
        self._lock = threading.Lock()

    def resolve(self, path):
        """The file's real path for a request path under /console/, or None: nothing
        outside the folder is ever named (`..`, `.` or empty segments, an absolute path, a
        NUL or a backslash, a hidden file, a symbolic link leading out, a folder)."""
        if not path or "\0" in path or "\\" in path or path.startswith("/"):
            return None
        segments = path.split("/")
        if any(s in ("", ".", "..") or s.startswith(".") for s in segments):
            return None
        real = os.path.realpath(os.path.join(self.root, *segments))
        if not real.startswith(self.root + os.sep) or not os.path.isfile(real):
            return None
        return real

    def digest(self, real):
        """The sha256 (hex) of a file, read again only when its (inode, size, mtime)
        changed: the tree's hash is asked for at every page load."""
        st = os.stat(real)
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._digests.get(real)
        if known is not None and known[0] == key:
            return known[1]
        return self.read(real)[0]

    def read(self, real):
        """(sha256 hex, content) of a file as read now; the digest is remembered."""
        with open(real, "rb") as f:
            st = os.fstat(f.fileno())
            content = f.read()
        digest = hashlib.sha256(content).hexdigest()
        with self._lock:
            self._digests[real] = ((st.st_ino, st.st_size, st.st_mtime_ns), digest)
        return digest, content

    def version(self):
        """A short hash of every file's path and content under the folder."""
        whole = hashlib.sha256()
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(n for n in names if not n.startswith(".")):
                real = os.path.join(folder, name)
                if not os.path.isfile(real):
                    continue
                digest = self.digest(real)
                whole.update(os.path.relpath(real, self.root).encode() + b"\0" +
                             digest.encode() + b"\0")
        return whole.hexdigest()[:16]


def not_found(message):
    error = NotFound(message)
    return Reply(error.body(), 404, {"Cache-Control": "no-store"})


def is_console_path(path):
    return path == "/console" or path.startswith("/console/")


def add_security_headers():
    """Bottle's after_request hook: every answer under /console/ carries the headers,
    errors raised before a handler ran (401, the CSRF refusal) included."""
    # every request passes here: the raw path first, bottle's request.path (the same
    # with one leading slash) only for a path that may be the console's
    if "console" in bottle.request.environ.get("PATH_INFO", "") and \
            is_console_path(bottle.request.path):
        for name, value in SECURITY_HEADERS.items():
            bottle.response.set_header(name, value)


def _file(call, body, etag, kind, cache):
    headers = {"ETag": etag, "Cache-Control": cache}
    if etag_matches(call.request.environ.get("HTTP_IF_NONE_MATCH"), etag):
        return Reply(b"", 304, headers)
    return Reply(body, 200, {**headers, "Content-Type": kind})


class Files:
    def __init__(self, settings):
        self.settings = settings
        self._trees = {}

    def tree(self):
        # the setting is read per request: tests point it at a folder of their own
        root = static_dir(self.settings)
        tree = self._trees.get(root)
        if tree is None:
            tree = self._trees.setdefault(root, Tree(root))
        return tree

    def index(self, call):
        # the page's relative names (js/main.js) need the trailing slash, which the API's
        # middleware strips from PATH_INFO; the raw request line still has it
        raw = call.request.environ.get("REQUEST_URI", "/console/").split("?", 1)[0]
        if not raw.endswith("/") and not raw.endswith("/" + INDEX):
            return Reply(b"", 302, {"Location": "/console/", "Cache-Control": "no-store"})
        tree = self.tree()
        real = tree.resolve(INDEX)
        if real is None:
            return not_found(f"the console's files are not installed: no {INDEX} in "
                             f"{tree.root} (setting console_static_dir)")
        _, content = tree.read(real)
        page = content.replace(VERSION_MARK, tree.version().encode())
        etag = '"' + hashlib.sha256(page).hexdigest()[:32] + '"'
        return _file(call, page, etag, content_type(INDEX), REVALIDATE)

    def file(self, call):
        path = call.params["path"]
        if path == INDEX:
            return self.index(call)
        tree = self.tree()
        real = tree.resolve(path)
        if real is None:
            return not_found(f"no such console file: {path}")
        # the ETag is the hash of the bytes sent, whatever changed since the tree's hash
        digest, content = tree.read(real)
        wanted = call.query.get("v")
        cache = IMMUTABLE if wanted and wanted == tree.version() else REVALIDATE
        return _file(call, content, f'"{digest[:32]}"', content_type(real), cache)


def register(api):
    files = Files(api.settings)
    common = {"permission": PUBLIC, "tag": "console", "media_type": "*/*",
              "response_schema": {"type": "string",
                                  "description": "a file of the web console"}}
    api.route("GET", "/console/", files.index,
              summary="The web console's page (docs/console.md)", **common)
    api.route("GET", "/console/<path:path>", files.file,
              summary="A file of the web console; 404 for any path outside its folder",
              **common)
    # where GET / sends a browser (appliance/api/system.py)
    api.browser_home = "/console/"
    app = getattr(api, "app", None)         # none in the builder's in-process Registry
    if app is not None:
        app.add_hook("after_request", add_security_headers)
