"""OpenAPI 3.1 document built from the route table, so every route is in it."""

import re

import appliance
from .errors import ERROR_TYPES

_PARAM = re.compile(r"<([a-zA-Z_][a-zA-Z0-9_]*)(?::[^>]*)?>")

ERROR_SCHEMA = {
    "type": "object",
    "required": ["type", "code", "message"],
    "properties": {"type": {"type": "string"}, "code": {"type": "integer"},
                   "message": {"type": "string"}},
}


# RFC 6749 section 5.2: the token endpoint's own errors
OAUTH_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "enum": [
        "invalid_request", "invalid_client", "invalid_grant", "unauthorized_client",
        "unsupported_grant_type", "invalid_scope", "too_many_requests"]},
        "error_description": {"type": "string"}, "error_uri": {"type": "string"}},
}


def _error_responses(route):
    codes = ["400", "404", "405", "409"]
    if not route.public:
        codes += ["401", "403"]
    if route.method in ("POST", "PUT"):
        codes += ["413", "415"]
    if route.method != "GET":
        codes.append("503")     # a record kept changing under every retry (conflicts.py)
    codes += [c for c in route.error_schemas if c not in codes]
    responses = {c: {"description": route.error_schemas.get(c, {}).get(
                         "description", ERROR_TYPES.get(int(c), "error")),
                     "content": {"application/json": {"schema": route.error_schemas.get(
                         c, {"$ref": "#/components/schemas/Error"})}}}
                 for c in sorted(codes)}
    if "429" in responses:
        responses["429"]["headers"] = {"Retry-After": {
            "description": "seconds to wait before trying again",
            "schema": {"type": "integer", "minimum": 1}}}
    return responses


def _operation(route):
    params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
              for name in _PARAM.findall(route.path)]
    for field in route.query_params:
        params.append({"name": field.name, "in": "query", "required": False,
                       "description": "equality filter; repeat for any-of",
                       "schema": {"type": "array", "items": {"type": "string"}},
                       "style": "form", "explode": True})
    if route.query_params:        # only list routes take filters, and so paging
        params += [
            {"name": "fields", "in": "query", "schema": {"type": "array",
                                                          "items": {"type": "string"}}},
            {"name": "sort_key", "in": "query", "schema": {"type": "string"}},
            {"name": "sort_dir", "in": "query", "schema": {"enum": ["asc", "desc"]}},
            {"name": "page_limit", "in": "query", "schema": {"type": "integer", "minimum": 1}},
            {"name": "page_marker", "in": "query", "schema": {"type": "string"}},
        ]
    params += route.parameters
    ok = {"description": "success"}
    if route.response_schema is not None:
        ok["content"] = {route.media_type: {"schema": route.response_schema}}
    responses = {str(route.status): ok, **_error_responses(route)}
    op = {
        "operationId": f"{route.method.lower()}_" + re.sub(r"\W+", "_", route.path).strip("_"),
        "summary": route.summary or f"{route.method} {route.path}",
        "tags": [route.tag],
        "responses": responses,
        "x-permission": " | ".join(route.permissions),
    }
    if params:
        op["parameters"] = params
    if route.public:
        op["security"] = []
    if route.method in ("POST", "PUT"):
        schema = route.request_schema or {"type": "object"}
        op["requestBody"] = {"required": route.request_schema is not None and
                             route.method == "PUT",
                             "content": {t: {"schema": schema} for t in route.accepts}}
    return op


def build(api):
    paths = {}
    for route in api.routes:
        path = _PARAM.sub(r"{\1}", route.path)
        paths.setdefault(path, {})[route.method.lower()] = _operation(route)
    schemas = {"Error": ERROR_SCHEMA, "OAuthError": OAUTH_ERROR_SCHEMA}
    for resource in {r.resource for r in api.routes if r.resource is not None}:
        schemas[resource.name] = resource.read_schema()
        schemas[resource.name + "Create"] = resource.create_schema()
        schemas[resource.name + "Update"] = resource.update_schema()
    return {
        "openapi": "3.1.0",
        "info": {"title": "appliance API", "version": appliance.__version__,
                 "description": "REST API of the appliance; every error body is Error."},
        "servers": [{"url": "/"}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "bearerFormat": "JWT"}},
        },
        "security": [{"bearer": []}],
    }
