"""Routes of the API itself: health, the root document, the OpenAPI document."""

import hashlib
import threading

import orjson

import appliance
from . import openapi
from .etags import etag_matches
from .routing import PUBLIC, Reply


def _quality(accept, types):
    """The highest q that the Accept header gives to any of these media ranges."""
    best = 0.0
    for part in accept.split(","):
        media, *params = [p.strip() for p in part.split(";")]
        if media.lower() not in types:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        best = max(best, q)
    return best


def prefers_html(accept):
    """Whether a client asks for a page before JSON (a browser's navigation does; curl,
    the CLI and the SDKs send */*, JSON or nothing, and keep the JSON root)."""
    if not accept:
        return False
    return _quality(accept, ("text/html",)) > _quality(
        accept, ("application/json", "application/*", "*/*"))


def register(api, health_extra=None):
    """health_extra: fields the composition root adds to the health answer."""
    def root(call):
        if api.browser_home and prefers_html(call.request.environ.get("HTTP_ACCEPT")):
            return Reply(b"", 302, {"Location": api.browser_home, "Vary": "Accept"})
        return Reply({"name": "appliance", "version": appliance.__version__,
                      "api_versions": appliance.API_VERSIONS}, 200, {"Vary": "Accept"})

    def health(call):
        return {"status": "ok", "version": appliance.__version__, **(health_extra or {})}

    document = OpenApiDocument(api)

    def openapi_document(call):
        return document.reply(call.request.get_header("If-None-Match", ""))

    api.route("GET", "/", root, permission=PUBLIC, summary="Name and versions", tag="system")
    api.route("GET", "/v1/health", health, permission=PUBLIC, summary="Liveness",
              tag="system")
    api.route("GET", "/v1/openapi.json", openapi_document, permission=PUBLIC,
              summary="This API as OpenAPI 3.1", tag="system")


class OpenApiDocument:
    """The OpenAPI document, built once (the routes are fixed once the app is compiled):
    ~700 kB that every console load reads, so it carries an ETag and a repeat read is a
    304 (docs/console.md, "Speed")."""

    def __init__(self, api):
        self.api = api
        self._lock = threading.Lock()
        self._built = None

    def _body_and_tag(self):
        with self._lock:
            if self._built is None:
                body = orjson.dumps(openapi.build(self.api))
                self._built = body, '"%s"' % hashlib.sha256(body).hexdigest()[:32]
            return self._built

    def reply(self, if_none_match):
        body, tag = self._body_and_tag()
        headers = {"ETag": tag, "Cache-Control": "no-cache"}
        if etag_matches(if_none_match, tag):
            return Reply(b"", 304, headers)
        return Reply(body, 200, {**headers, "Content-Type": "application/json"})
