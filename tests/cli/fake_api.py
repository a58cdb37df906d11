"""A small stand-in for the appliance API, served by a real Waitress server in the CLI tests.

It exists only because the real API is being written at the same moment as the CLI; it imitates
/work/shared/api-conventions.md (token endpoint with OAuth errors, introspect, logout, bearer
tokens, a `/v1/things/` collection with marker paging and filters, items, actions, and
`{"type","code","message"}` error bodies) so the CLI's HTTP behaviour is tested over a socket.
The CLI's integration with the real API is covered by the API's own tests.

Deliberately strict where the CLI must be careful: collections answer only on their canonical
path with the trailing slash and items only without it, so a test passes only if the CLI
normalized the path it was given.
"""

from __future__ import annotations

import datetime
import json
import secrets
import threading
import time
import uuid

import bottle

PROJECT_ID = "11111111-1111-1111-1111-111111111111"
PASSWORD = "s3cret"
THING_FIELDS = {"uuid", "name", "status", "size", "enabled", "tags", "description", "project_id"}
FILTERABLE = {"name", "status", "size", "enabled"}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _error(status: int, error_type: str, message: str) -> bottle.HTTPResponse:
    body = json.dumps({"type": error_type, "code": status, "message": message})
    return bottle.HTTPResponse(body, status=status, headers={"Content-Type": "application/json"})


def _oauth_error(error: str, description: str) -> bottle.HTTPResponse:
    body = json.dumps({"error": error, "error_description": description})
    return bottle.HTTPResponse(body, status=400, headers={"Content-Type": "application/json"})


class FakeApi:
    def __init__(self):
        self.lock = threading.Lock()
        self.app = bottle.Bottle()
        self.app.default_error_handler = self._render_bottle_error
        self.app.add_hook("before_request", self._record_request)
        self._route()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.admin_uuid = str(uuid.uuid4())
            self.access_tokens: dict[str, dict] = {}
            self.refresh_tokens: dict[str, dict] = {}
            self.things: dict[str, dict] = {}
            self.requests: list[dict] = []
            self.token_bodies: list[dict] = []
            self.access_ttl = 3600

    # --- knobs for tests ---

    def expire_access_tokens(self) -> None:
        with self.lock:
            for grant in self.access_tokens.values():
                grant["expired"] = True

    def revoke_refresh_tokens(self) -> None:
        with self.lock:
            self.refresh_tokens.clear()

    def add_thing(self, **fields) -> dict:
        thing = {
            "uuid": str(uuid.uuid4()), "name": None, "status": "NEW", "size": None, "enabled": False,
            "tags": [], "description": None, "project_id": PROJECT_ID,
            "created_at": _now(), "updated_at": _now(),
        }
        thing.update(fields)
        with self.lock:
            self.things[thing["uuid"]] = thing
        return thing

    def requests_to(self, path: str) -> list[dict]:
        return [request for request in self.requests if request["path"] == path]

    # --- plumbing ---

    def _record_request(self) -> None:
        request = bottle.request
        self.requests.append({
            "method": request.method,
            "path": request.path,
            "query": list(request.query.allitems()),
            "authorization": request.get_header("Authorization"),
        })

    def _render_bottle_error(self, error: bottle.HTTPError) -> str:
        error.content_type = "application/json"
        name = {404: "NotFound", 405: "MethodNotAllowed"}.get(error.status_code, "Error")
        return json.dumps({"type": name, "code": error.status_code, "message": f"no route for {bottle.request.path}"})

    def _caller(self) -> dict:
        header = bottle.request.get_header("Authorization") or ""
        if not header.startswith("Bearer "):
            raise _error(401, "Unauthorized", "no token")
        grant = self.access_tokens.get(header[len("Bearer "):])
        if grant is None:
            raise _error(401, "Unauthorized", "token is not valid")
        if grant["expired"]:
            raise _error(401, "Unauthorized", "token expired")
        return grant

    def _json_body(self):
        raw = bottle.request.body.read()
        if not raw:
            return None
        if bottle.request.content_type.split(";")[0] != "application/json":
            raise _error(415, "UnsupportedMediaType", "send application/json")
        try:
            return json.loads(raw)
        except ValueError:
            raise _error(400, "BadRequest", "malformed JSON") from None

    def _thing(self, thing_uuid: str) -> dict:
        thing = self.things.get(thing_uuid)
        if thing is None:
            raise _error(404, "NotFound", f"thing {thing_uuid} not found")
        return thing

    def _route(self) -> None:
        app = self.app
        app.route("/v1/iam/clients/<client>/actions/get_token/invoke", "POST", self.get_token)
        app.route("/v1/iam/clients/<client>/actions/introspect", "GET", self.introspect)
        app.route("/v1/iam/clients/<client>/actions/logout/invoke", "POST", self.logout)
        app.route("/v1/things/", "GET", self.list_things)
        app.route("/v1/things/", "POST", self.create_thing)
        app.route("/v1/things/<thing_uuid>", "GET", self.show_thing)
        app.route("/v1/things/<thing_uuid>", "PUT", self.update_thing)
        app.route("/v1/things/<thing_uuid>", "DELETE", self.delete_thing)
        app.route("/v1/things/<thing_uuid>/actions/<name>/invoke", "POST", self.invoke_action)
        app.route("/v1/things/<thing_uuid>/actions/<name>", "GET", self.read_action)
        app.route("/v1/boom/", "GET", self.boom)
        app.route("/v1/badgateway/", "GET", self.bad_gateway)
        app.route("/v1/slow/", "GET", self.slow)

    # --- IAM ---

    def _issue(self, username: str, scope: str) -> dict:
        access, refresh = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        project_id = scope.split(":", 1)[1] if scope.startswith("project:") else None
        self.access_tokens[access] = {"username": username, "project_id": project_id, "expired": False}
        self.refresh_tokens[refresh] = {"username": username, "scope": scope}
        expires_at = datetime.datetime.fromtimestamp(time.time() + self.access_ttl, datetime.timezone.utc)
        return {
            "access_token": access, "token_type": "Bearer", "expires_in": self.access_ttl,
            "expires_at": expires_at.isoformat().replace("+00:00", "Z"),
            "refresh_token": refresh, "refresh_expires_in": 86400, "scope": scope,
        }

    def get_token(self, client):
        if bottle.request.content_type.startswith("application/x-www-form-urlencoded"):
            body = dict(bottle.request.forms)
        else:
            body = self._json_body() or {}
        self.token_bodies.append(body)
        grant_type = body.get("grant_type")
        if grant_type == "password":
            if body.get("username") != "admin" or body.get("password") != PASSWORD:
                return _oauth_error("invalid_grant", "invalid username or password")
            return self._issue("admin", body.get("scope") or "")
        if grant_type == "refresh_token":
            # Refresh tokens rotate: the old one is spent.
            grant = self.refresh_tokens.pop(body.get("refresh_token"), None)
            if grant is None:
                return _oauth_error("invalid_grant", "refresh token is not valid")
            return self._issue(grant["username"], grant["scope"])
        return _oauth_error("unsupported_grant_type", f"grant_type {grant_type!r} is not supported")

    def introspect(self, client):
        grant = self._caller()
        return {
            "user_info": {"uuid": self.admin_uuid, "username": grant["username"]},
            "project_id": grant["project_id"],
            "permissions": ["*.*.*"],
        }

    def logout(self, client):
        self._caller()
        token = bottle.request.get_header("Authorization")[len("Bearer "):]
        del self.access_tokens[token]
        return bottle.HTTPResponse(status=204)

    # --- things ---

    def list_things(self):
        self._caller()
        query = bottle.request.query
        items = list(self.things.values())
        for key in query:
            if key in ("sort_key", "sort_dir", "page_limit", "page_marker", "fields"):
                continue
            if key not in FILTERABLE:
                raise _error(400, "BadRequest", f"cannot filter on unknown field {key!r}")
            wanted = query.getall(key)
            items = [item for item in items if str(item[key]).lower() in {value.lower() for value in wanted}]
        if query.get("sort_key"):
            items.sort(key=lambda item: str(item.get(query["sort_key"])), reverse=query.get("sort_dir") == "desc")
        if query.get("page_marker"):
            uuids = [item["uuid"] for item in items]
            if query["page_marker"] not in uuids:
                raise _error(400, "BadRequest", "unknown page_marker")
            items = items[uuids.index(query["page_marker"]) + 1:]
        if query.get("page_limit"):
            limit = int(query["page_limit"])
            bottle.response.set_header("X-Pagination-Limit", str(limit))
            # Like a real server that does not count ahead, a full page announces a marker
            # even when nothing follows; the client must stop on the empty page.
            if len(items) >= limit:
                bottle.response.set_header("X-Pagination-Marker", items[limit - 1]["uuid"])
            items = items[:limit]
        bottle.response.content_type = "application/json"
        return json.dumps(items)

    def create_thing(self):
        self._caller()
        body = self._json_body()
        if not isinstance(body, dict):
            raise _error(400, "BadRequest", "body must be a JSON object")
        unknown = sorted(set(body) - THING_FIELDS)
        if unknown:
            raise _error(400, "BadRequest", f"unknown field {unknown[0]!r}")
        if not isinstance(body.get("name"), str):
            raise _error(400, "BadRequest", "name is required and must be a string")
        if "size" in body and not isinstance(body["size"], int):
            raise _error(400, "BadRequest", "size must be an integer")
        thing = self.add_thing(**body)
        bottle.response.status = 201
        bottle.response.set_header("Location", f"/v1/things/{thing['uuid']}")
        return thing

    def show_thing(self, thing_uuid):
        self._caller()
        return self._thing(thing_uuid)

    def update_thing(self, thing_uuid):
        self._caller()
        thing = self._thing(thing_uuid)
        body = self._json_body() or {}
        unknown = sorted(set(body) - THING_FIELDS)
        if unknown:
            raise _error(400, "BadRequest", f"unknown field {unknown[0]!r}")
        thing.update(body, updated_at=_now())
        return thing

    def delete_thing(self, thing_uuid):
        self._caller()
        self._thing(thing_uuid)
        del self.things[thing_uuid]
        return bottle.HTTPResponse(status=204)

    def invoke_action(self, thing_uuid, name):
        self._caller()
        thing = self._thing(thing_uuid)
        body = self._json_body()
        if body is not None and not isinstance(body, dict):
            raise _error(400, "BadRequest", "action body must be a JSON object")
        if name == "start":
            thing["status"] = "ACTIVE"
            thing["description"] = (body or {}).get("reason", thing["description"])
            return thing
        if name == "ping":
            return bottle.HTTPResponse(status=204)
        raise _error(404, "NotFound", f"no action {name!r} on things")

    def read_action(self, thing_uuid, name):
        self._caller()
        thing = self._thing(thing_uuid)
        if name != "stats":
            raise _error(404, "NotFound", f"no action {name!r} on things")
        return {"uuid": thing["uuid"], "echo": dict(bottle.request.query)}

    # --- failures ---

    def boom(self):
        self._caller()
        raise _error(500, "InternalError", "database on fire")

    def bad_gateway(self):
        self._caller()
        return bottle.HTTPResponse("<html><body>502 Bad Gateway</body></html>", status=502,
                                   headers={"Content-Type": "text/html"})

    def slow(self):
        self._caller()
        time.sleep(1.0)
        return []
