"""The browser's session: /console/session logs in, tells who is logged in, switches the
project and logs out, keeping the access token in an HttpOnly cookie (docs/console.md).

Why a cookie and not the token in the page: a script injected into the page could read a
token kept in JavaScript or localStorage and send it away; it cannot read an HttpOnly
cookie. The cookie then needs the CSRF check, which the IAM's authenticator does for every
route (appliance/iam/cookies.py). The login itself is the IAM's password grant, with its
throttling and its audit entry: no second copy of either here.
"""

import datetime
import secrets

from state import format_time, parse_time

from appliance.api import request_context
from appliance.api.errors import ApiError, BadRequest, Forbidden, Unauthorized
from appliance.api.fields import UUID_RE
from appliance.api.routing import AUTHENTICATED, PUBLIC, Reply
from appliance.iam.auth import OAuthError
from appliance.iam.cookies import CSRF_COOKIE, SESSION_COOKIE, read_cookies

PATH = "/console/session"
_USER_FIELDS = ("uuid", "username", "first_name", "last_name", "email", "type", "status")
_SESSION_SCHEMA = {"type": "object", "properties": {
    "user": {"type": "object"}, "project_id": {"type": ["string", "null"]},
    "expires_at": {"type": "string"},
    "projects": {"type": "array", "items": {"type": "object", "properties": {
        "uuid": {"type": "string"}, "name": {"type": "string"}}}},
    "permissions": {"type": "array", "items": {"type": "string"}}}}
_PROJECT = {"type": ["string", "null"], "description": "a project's uuid; null or absent: "
                                                       "no project (the user's global roles)"}


def is_https(environ):
    """Whether the browser reached us over HTTPS: the image's nginx says so in
    X-Forwarded-Proto, which Waitress takes from that proxy only (appliance/server.py) and
    turns into wsgi.url_scheme."""
    return environ.get("wsgi.url_scheme") == "https"


def cookie(name, value, max_age, *, http_only, secure):
    parts = [f"{name}={value}", "Path=/", f"Max-Age={max_age}", "SameSite=Strict"]
    if http_only:
        parts.append("HttpOnly")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def session_cookies(token, csrf, max_age, secure):
    """The two cookies of a session (empty values and Max-Age=0 clear them): the token
    HttpOnly, the CSRF token readable by the page."""
    return (cookie(SESSION_COOKIE, token, max_age, http_only=True, secure=secure),
            cookie(CSRF_COOKIE, csrf, max_age, http_only=False, secure=secure))


def _seconds_left(expires_at):
    end = parse_time(expires_at)
    return max(0, int((end - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))


def _user_principal(call):
    principal = call.principal
    if getattr(principal, "user", None) is None:
        raise Forbidden("the web console's session is for users only")
    return principal


def _project_of(body):
    if body is None:
        return None
    if not isinstance(body, dict):
        raise BadRequest("body must be an object")
    project = body.get("project")
    if project is None or project == "":
        return None
    if not isinstance(project, str) or not UUID_RE.match(project):
        raise BadRequest("project must be a project's uuid or null")
    return project.lower()


class Sessions:
    def __init__(self, api):
        self.api = api

    @property
    def auth(self):
        return self.api.authenticate

    def describe(self, principal, expires_at):
        """The session as the front end needs it: who, where, until when, which projects
        it may switch to, and what it may do (the names the API checks)."""
        store = self.api.store
        projects = store.collection("iam_projects")
        bindings = list(store.collection("iam_role_bindings").by("user", principal.user_uuid))
        if any(b.get("project") is None for b in bindings):
            bound = projects.records()          # a global role: any project
        else:
            bound = [p for p in (projects.get(b["project"]) for b in bindings) if p]
        listed = {p["uuid"]: {"uuid": p["uuid"], "name": p.get("name")} for p in bound}
        return {"user": {k: principal.user.get(k) for k in _USER_FIELDS},
                "project_id": principal.project_id, "expires_at": expires_at,
                "projects": sorted(listed.values(), key=lambda p: (p["name"] or "", p["uuid"])),
                "permissions": sorted(principal.permissions)}

    def _answer(self, call, principal, token, expires_at, status=200):
        secure = is_https(call.request.environ)
        max_age = _seconds_left(expires_at)
        headers = {"Cache-Control": "no-store"}
        cookies = () if token is None else session_cookies(
            token, secrets.token_urlsafe(32), max_age, secure)
        return Reply(self.describe(principal, expires_at), status, headers, cookies)

    def login(self, call):
        body = call.body
        if not isinstance(body, dict):
            raise BadRequest("body must be an object with username and password")
        username, password = body.get("username"), body.get("password")
        if not isinstance(username, str) or not username or not isinstance(password, str):
            raise BadRequest("username and password are required (strings)")
        project = _project_of(body)
        try:
            token, expires_at, principal = self.auth.console_session(
                call, username, password, project)
        except OAuthError as e:
            raise _api_error(e) from None
        return self._answer(call, principal, token, expires_at)

    def show(self, call):
        principal = _user_principal(call)
        expires_at = datetime.datetime.fromtimestamp(principal.claims["exp"],
                                                     datetime.timezone.utc)
        return self._answer(call, principal, None, format_time(expires_at))

    def switch(self, call):
        principal = _user_principal(call)
        project = _project_of(call.body)
        try:
            token, expires_at, moved = self.auth.rescope(principal, project)
        except OAuthError as e:
            raise _api_error(e) from None
        return self._answer(call, moved, token, expires_at)

    def logout(self, call):
        """204 always, the cookies cleared; the session revoked when the cookie still
        held one (an expired one needs no revoking). A cookie that holds a session must
        pass the CSRF check: another site may not log the user out. Only the cookie's
        session: a bearer client logs out at the IAM's logout route, and a token in the
        Authorization header is not read here."""
        environ = call.request.environ
        call.principal = None
        if read_cookies(environ).get(SESSION_COOKIE) and "HTTP_AUTHORIZATION" not in environ:
            try:
                call.principal = self.auth(call.request)
            except Unauthorized:
                pass
        if getattr(call.principal, "user", None) is not None:
            request_context.set_actor(request_context.actor_of(call.principal))
            self.auth.logout(call)
        return Reply(None, 204, {"Cache-Control": "no-store"},
                     session_cookies("", "", 0, is_https(environ)))


def _api_error(error):
    """The IAM grant's OAuth error as the API's error body."""
    if error.status == 429:
        return ApiError(error.description, 429, "TooManyRequests", headers=error.headers)
    if error.error == "invalid_grant":
        return Unauthorized("wrong username or password")
    if error.error == "invalid_scope":
        return Forbidden("the user is not bound in that project; pick one of its projects")
    return BadRequest(error.description)


def _error(description):
    return {"description": description, "$ref": "#/components/schemas/Error"}


LOGIN_ERRORS = {"401": _error("wrong username or password"),
                "403": _error("the user is not bound in that project"),
                "429": _error("too many failed logins for this username or from this "
                              "address (TooManyRequests); wait Retry-After seconds")}
LOGOUT_ERRORS = {"403": _error("the cookie's session, without X-CSRF-Token echoing the "
                               "appliance_csrf cookie")}


def register(api):
    sessions = Sessions(api)
    common = {"tag": "console", "response_schema": _SESSION_SCHEMA}
    api.route("POST", PATH, sessions.login, permission=PUBLIC,
              summary="Log in to the web console: the session in an HttpOnly cookie, the "
                      "CSRF token in a readable one (docs/console.md)",
              request_schema={"type": "object", "required": ["username", "password"],
                              "properties": {"username": {"type": "string"},
                                             "password": {"type": "string"},
                                             "project": _PROJECT}},
              error_schemas=LOGIN_ERRORS, **common)
    api.route("GET", PATH, sessions.show, permission=AUTHENTICATED,
              summary="The web console's session: user, project, projects, permissions",
              **common)
    api.route("PUT", PATH, sessions.switch, permission=AUTHENTICATED,
              summary="Move the web console's session to another project of the user",
              request_schema={"type": "object", "properties": {"project": _PROJECT}},
              **common)
    # public: an expired session must still be able to clear its cookies
    api.route("DELETE", PATH, sessions.logout, permission=PUBLIC, status=204,
              summary="Log out of the web console: the session revoked, its cookies "
                      "cleared", tag="console", error_schemas=LOGOUT_ERRORS)
