"""Routes of the API itself: health, the root document, the OpenAPI document."""

import appliance
from . import openapi
from .routing import PUBLIC


def register(api, health_extra=None):
    """health_extra: fields the composition root adds to the health answer."""
    def root(call):
        return {"name": "appliance", "version": appliance.__version__,
                "api_versions": appliance.API_VERSIONS}

    def health(call):
        return {"status": "ok", "version": appliance.__version__, **(health_extra or {})}

    def openapi_document(call):
        return openapi.build(api)

    api.route("GET", "/", root, permission=PUBLIC, summary="Name and versions", tag="system")
    api.route("GET", "/v1/health", health, permission=PUBLIC, summary="Liveness",
              tag="system")
    api.route("GET", "/v1/openapi.json", openapi_document, permission=PUBLIC,
              summary="This API as OpenAPI 3.1", tag="system")
