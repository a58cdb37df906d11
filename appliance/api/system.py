"""Routes of the API itself: health, the root document, the OpenAPI document."""

import appliance
from . import openapi
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

    def openapi_document(call):
        return openapi.build(api)

    api.route("GET", "/", root, permission=PUBLIC, summary="Name and versions", tag="system")
    api.route("GET", "/v1/health", health, permission=PUBLIC, summary="Liveness",
              tag="system")
    api.route("GET", "/v1/openapi.json", openapi_document, permission=PUBLIC,
              summary="This API as OpenAPI 3.1", tag="system")
