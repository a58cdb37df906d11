"""The route table and the one wrapper every route goes through.

A route is registered with the permission it needs (`<service>.<policy>.<action>`, or
PUBLIC for the few that need no token). The wrapper authenticates, checks the permission
(deny by default: with no authenticator installed every non-public route answers 401),
reads and parses the body within its size limit, calls the handler and maps every error
to the JSON error body. Handlers are plain functions of a `Call`.
"""

import json
import logging

import bottle
import orjson

import state
from .conflicts import retry_conflicts
from . import answers, audit, bodies, longlived, request_context
from .registry import Registry
from .errors import (ApiError, BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge,
                     Unauthorized, UnsupportedMediaType)

log = logging.getLogger("appliance.api")

PUBLIC = "public"
# any valid token, no permission: routes that act on the caller's own token or user only
AUTHENTICATED = "authenticated"
# max_body of routes that take manifests or uploads: the setting max_upload_bytes
UPLOAD = "upload"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
YAML = "application/yaml"
_BODY_METHODS = ("POST", "PUT", "PATCH")


class Reply:
    """cookies: Set-Cookie values, one header each (a dict of headers holds one)."""

    def __init__(self, body=None, status=200, headers=None, cookies=()):
        self.body, self.status, self.headers = body, status, headers or {}
        self.cookies = tuple(cookies)


class Stream(Reply):
    """A reply whose body is an iterable of bytes, sent as it comes (an event stream)."""

    def __init__(self, chunks, content_type, headers=None):
        super().__init__(chunks, 200, headers)
        self.content_type = content_type


def _encoded(response, body, status):
    """What a reply's body is sent as: nothing for a 204 without one, bytes as they are
    (already encoded; their type in the headers), anything else as JSON."""
    if body is None and status == 204:
        return b""
    if isinstance(body, bytes):
        return body
    response.content_type = "application/json"
    return orjson.dumps(body)


class Call:
    """What a handler gets: the request, the caller, the parsed body."""

    def __init__(self, api, route, request, params):
        self.api = api
        self.route = route
        self.request = request
        self.params = params
        # no query string, nothing to parse (an item GET's common case): an empty one of
        # the same type; bottle's own request.query would parse it into the same
        self.query = request.query if request.environ.get("QUERY_STRING") \
            else bottle.FormsDict()
        self.principal = None
        self.body = None
        self.content_type = None

    @property
    def store(self):
        return self.api.store


class SystemCall:
    """A call made by the platform itself (the Element Manager materializing a manifest):
    no HTTP request, an unscoped caller with every permission."""

    def __init__(self, api, principal, body=None):
        self.api = api
        self.principal = principal
        self.body = body
        self.params = {}
        self.query = bottle.FormsDict()
        self.request = None

    @property
    def store(self):
        return self.api.store


class Route:
    def __init__(self, method, path, handler, permission, summary, request_schema,
                 response_schema, status, max_body, accepts, tag, query_params, resource,
                 error_schemas=None, parameters=None, media_type="application/json",
                 answer_kinds=None):
        self.method = method
        self.path = path
        self.handler = handler
        self.permission = permission
        self.summary = summary
        self.request_schema = request_schema
        self.response_schema = response_schema
        self.status = status
        self.max_body = max_body
        self.accepts = accepts
        self.tag = tag
        self.query_params = query_params or []
        self.resource = resource
        # status -> schema, for a route whose errors are not all the Error body (OpenAPI)
        self.error_schemas = error_schemas or {}
        # OpenAPI query parameter objects of a route that is not a list (a read
        # action's own query: `offset`, `name`); a list's filters are `query_params`
        self.parameters = list(parameters or ())
        # what a success answer is (the console's files are not JSON)
        self.media_type = media_type
        # the kinds a 200 answer is worked out from, besides the caller's principal, when
        # nothing else goes into it: the event loop may answer it again (answers.py)
        self.answer_kinds = tuple(answer_kinds) if answer_kinds else None

    @property
    def public(self):
        return self.permission == PUBLIC

    @property
    def permissions(self):
        """A route may accept any of several permissions (a tuple)."""
        return self.permission if isinstance(self.permission, tuple) else (self.permission,)

    def __repr__(self):
        return f"<Route {self.method} {self.path} {self.permission}>"


def _note_result(call, result):
    """The created or changed object names its project, and a created one its uuid (an
    item route's uuid is the path's), for the audit entry."""
    try:
        body = result.body if isinstance(result, Reply) else result
        if isinstance(body, dict) and isinstance(body.get("uuid"), str):
            facts = {} if "uuid" in call.params else {"resource_uuid": body["uuid"]}
            if "project_id" in body:
                facts["project_id"] = body["project_id"]
            audit.note(call.request.environ, **facts)
    except Exception:              # noqa: BLE001 (the audit never fails a request)
        log.exception("audit: the answer's resource could not be noted")


class _Router(bottle.Router):
    """bottle's router, compiling a method's combined pattern once instead of after every
    route added: with ~150 routes that was O(n^2) regex compiles, a third of the API's
    start (seconds under TCG). The pattern is compiled at the first match after an add;
    Api.compile_routes() does it before serving, so request threads find it ready (two
    threads compiling at once would only build the same pattern twice)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._stale = set()

    def _compile(self, method):
        self._stale.add(method)

    def compile_stale(self):
        for method in list(self._stale):
            super()._compile(method)
            self._stale.discard(method)

    def match(self, environ):
        if self._stale:
            self.compile_stale()
        return super().match(environ)


def _media_type(header):
    return (header or "").split(";", 1)[0].strip().lower()


class Api(Registry):
    def __init__(self, settings, store):
        super().__init__(settings, store)
        self.app = bottle.Bottle()     # catchall stays on: escapes get _bottle_error
        # before any route is added; bottle's __setattr__ refuses to replace an attribute
        self.app.__dict__["router"] = _Router()
        self.app.default_error_handler = self._bottle_error
        self.routes = []
        # long polls and event streams wait here, not in a Waitress thread (longlived.py)
        self.eventloop = longlived.EventLoop()
        # item GETs the event loop may answer again (answers.py)
        self.answers = answers.Answers(store)

    # ---- registration ------------------------------------------------------------

    def route(self, method, path, handler, *, permission, summary="", request_schema=None,
              response_schema=None, status=200, max_body=None, accepts=(JSON,), tag=None,
              query_params=None, resource=None, error_schemas=None, parameters=None,
              media_type="application/json", answer_kinds=None):
        if not permission:
            raise ValueError(f"route {method} {path} declares no permission")
        route = Route(method, path.rstrip("/") or "/", handler, permission, summary,
                      request_schema, response_schema, status,
                      self._body_limit(max_body), accepts,
                      tag or path.strip("/").split("/")[1 if path.startswith("/v1/") else 0],
                      query_params, resource, error_schemas, parameters, media_type,
                      answer_kinds)
        self.routes.append(route)
        self.app.route(route.path, method, self._wrap(route))
        return route

    def compile_routes(self):
        """Compile the route table now, once every route is registered (see _Router)."""
        self.app.router.compile_stale()

    def _body_limit(self, max_body):
        if max_body == UPLOAD:
            return self.settings["max_upload_bytes"]
        return max_body or self.settings["max_body_bytes"]

    # ---- the wrapper -------------------------------------------------------------

    def _wrap(self, route):
        kind = route.resource.kind if route.resource is not None else None
        # only a state-changing request has an audit entry to note facts for
        audited = route.method in audit.STATE_CHANGING

        def endpoint(**params):
            call = Call(self, route, bottle.request, params)
            # before any read, as every cache of the store's records takes its stamp
            stamp = self._answer_stamp(route, call) if route.answer_kinds else None
            if audited:
                audit.note(call.request.environ, route=route.path, kind=kind,
                           resource_uuid=params.get("uuid"))
            try:
                result = self._serve(route, call)
            except ApiError as e:
                return self._error(e)
            except state.NotFound as e:
                return self._error(NotFound(str(e)))
            except state.DuplicateKey as e:
                what = route.resource.name if route.resource else e.kind
                pairs = ", ".join(f"{f}={v!r}" for f, v in zip(e.fields, e.values))
                return self._error(Conflict(f"a {what} with {pairs} already exists"))
            except Exception:
                log.exception("unhandled error in %s %s", route.method, route.path)
                return self._error(ApiError("internal error; see the API log"))
            if audited:
                _note_result(call, result)
            if stamp is not None:
                self._keep_answer(call, stamp)
            return self._reply(route, result)
        endpoint.__name__ = f"{route.method} {route.path}"
        return endpoint

    def _serve(self, route, call):
        if not route.public:
            if self.authenticate is None:
                raise Unauthorized("no authentication is configured")
            call.principal = self.authenticate(call.request)
            request_context.set_actor(request_context.actor_of(call.principal))
            allows = call.principal.allows
            for permission in route.permissions:
                if allows(permission):
                    break
            else:
                if route.permission == AUTHENTICATED:
                    raise Forbidden("this route is for users only")
                raise Forbidden(f"permission {' or '.join(route.permissions)} is required")
        if route.method in _BODY_METHODS:
            self._read_body(route, call)
        return retry_conflicts(lambda: route.handler(call))

    def _answer_stamp(self, route, call):
        """The stamp an answer of `route` to this request is kept with (answers.py): the
        route's kinds and those a token's principal is read from; None where it is not
        to be kept (not a bearer token's GET without a query)."""
        principal_kinds = getattr(self.authenticate, "principal_kinds", None)
        if principal_kinds is None or answers.Answers.key(call.request.environ) is None:
            return None
        return self.store.stamp(principal_kinds + route.answer_kinds)

    @staticmethod
    def _keep_answer(call, stamp):
        """Mark the answer to be kept: a user's access token (its principal is the token's
        and the principal kinds' alone; an agent's is its claim's), until it expires."""
        principal = call.principal
        claims = getattr(principal, "claims", None)
        if principal is None or getattr(principal, "node", None) is not None \
                or not isinstance(claims, dict) or "exp" not in claims:
            return
        call.request.environ[answers.FILL] = (stamp, claims["exp"], request_context.actor())

    def _read_body(self, route, call):
        request = call.request
        length = request.content_length
        if length > route.max_body:
            raise PayloadTooLarge(f"body of {length} bytes exceeds the limit of "
                                  f"{route.max_body} bytes")
        yaml_limit = self.settings["max_yaml_bytes"]
        if length > yaml_limit and YAML in route.accepts \
                and _media_type(request.content_type) == YAML:
            # before a byte is read: the YAML parser is pure Python (about 100 KiB of
            # structure a second here; a 30 MiB scalar took 52 s), JSON is not
            raise PayloadTooLarge(f"a YAML body of {length} bytes exceeds the limit of "
                                  f"{yaml_limit} bytes for YAML; send it as JSON (up to "
                                  f"{route.max_body} bytes)")
        raw = request.environ["wsgi.input"].read(length) if length > 0 else b""
        if not raw.strip():
            call.body = None
            return
        media = _media_type(request.content_type)
        if media not in route.accepts and not (JSON in route.accepts and media.endswith("+json")):
            raise UnsupportedMediaType(
                f"Content-Type {media or '(none)'} is not supported here; send "
                + " or ".join(route.accepts))
        call.content_type = media
        try:
            if media == FORM:
                call.body = {k: v for k, v in bottle.FormsDict(
                    bottle._parse_qsl(raw.decode("utf-8"))).allitems()}
            elif media == YAML:
                from . import yaml_bodies  # noqa: PLC0415 (only the API reads YAML bodies)
                call.body = yaml_bodies.parse_yaml(raw.decode("utf-8"))
            else:
                call.body = bodies.parse_json(raw)
        except UnicodeDecodeError:
            raise BadRequest("body is not valid UTF-8") from None
        except bodies.ShapeError as e:
            raise BadRequest(str(e)) from None

    # ---- responses ---------------------------------------------------------------

    def _reply(self, route, result):
        response = bottle.response
        if isinstance(result, longlived.Parked):
            return longlived.reply(self.eventloop, result, response, bottle.request.method)
        if not isinstance(result, Reply):
            # a handler's plain answer (most of them): the route's status, JSON, no
            # headers of its own; response.bind() left 200 OK in place
            status = route.status
            if status != 200 or response.status_line != "200 OK":
                response.status = status
            return _encoded(response, result, status)
        response.status = result.status
        for k, v in result.headers.items():
            response.set_header(k, v)
        for value in result.cookies:
            response.add_header("Set-Cookie", value)
        if isinstance(result, Stream):
            response.content_type = result.content_type
            return result.body
        return _encoded(response, result.body, result.status)

    def _error(self, error):
        response = bottle.response
        response.status = error.status
        response.content_type = "application/json"
        for k, v in error.headers.items():
            response.set_header(k, v)
        return json.dumps(error.body()).encode()

    def _bottle_error(self, res):
        """Errors raised by Bottle itself: no route (404), wrong method (405)."""
        res.content_type = "application/json"
        if res.status_code == 404:
            error = NotFound(f"no such path: {bottle.request.path}")
        elif res.status_code == 405:
            allowed = res.headers.get("Allow", "")
            error = ApiError(f"method {bottle.request.method} is not allowed on "
                             f"{bottle.request.path}; allowed: {allowed}", 405,
                             "MethodNotAllowed")
        else:
            error = ApiError(str(res.body or res.status_line), res.status_code)
            if res.status_code >= 500:
                log.error("bottle error %s: %s", res.status_code, res.exception)
                error = ApiError("internal error; see the API log")
        return json.dumps(error.body())
