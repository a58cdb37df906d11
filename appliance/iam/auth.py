"""Who is calling: the token endpoint, introspection, logout and the authenticator that
every non-public route runs.

A caller's permissions are the permissions of the roles bound to it globally plus, for a
token scoped to a project, the roles bound to it in that project. They are computed once
per (user, project) and kept until any IAM kind involved changes.

The principal a user's access token stands for is kept too, per token, with the versions
of every kind it was worked out from (PRINCIPAL_KINDS): a request whose token is cached
checks its expiry and that none of those kinds changed since (one shared-memory read
each, docs/server.md), instead of the revocation, the user, the project and the
permissions. Any write to one of them (a logout, a role binding, a user disabled or
deleted, in this process or another) works every cached principal out again at the next
request, so each takes effect at once, as it did before the cache.
"""

import datetime
import math
import re
import threading
import time
import uuid as uuidlib

from appliance.api.errors import Unauthorized
from appliance.api.fields import UUID_RE
from appliance.api.routing import AUTHENTICATED, FORM, JSON, PUBLIC, Reply
from state import format_time

from appliance.api import audit

from . import builtin, cookies, passwords
from .permissions import Principal
from .throttle import LoginThrottle, Throttled
from .tokens import InvalidToken, TokenSigner

KINDS = ("iam_role_bindings", "iam_permission_bindings", "iam_permissions")
# what principal_of reads to turn a verified token into its principal
PRINCIPAL_KINDS = ("iam_revoked_sessions", "iam_users", "iam_projects", *KINDS)
PRINCIPAL_CACHE_SIZE = 10000
# grant -> the field naming the user; `login+password` is the reference CLI's `-l LOGIN`
# (our login is the username)
PASSWORD_GRANTS = {"password": "username", "login+password": "login"}
# "expired" on purpose: the reference CLI answers an invalid_grant that says so by logging
# in again with the password it has, instead of giving up
PASSWORD_CHANGED = "session expired: the user's password changed since"


def password_version(user):
    """How many times the user's password changed; tokens carry it as `pwv`."""
    return user.get("password_version") or 0


def survives_password_changes(claims, user):
    """A token lives on after a password change only in the session that made it."""
    return claims.get("pwv", 0) == password_version(user) or (
        claims.get("sid") is not None and claims["sid"] == user.get("password_session"))
# The grant's errors are RFC 6749's; a request that cannot be read as one at all (a body
# that is not JSON, a malformed header) is refused earlier with the API's Error body.
_EITHER = {"description": "OAuthError from the grant; Error when the request cannot be read",
           "anyOf": [{"$ref": "#/components/schemas/OAuthError"},
                     {"$ref": "#/components/schemas/Error"}]}
_THROTTLED = {"description": "too many failed logins for this username or from this "
                             "address: OAuthError `too_many_requests`; wait Retry-After "
                             "seconds", "$ref": "#/components/schemas/OAuthError"}
OAUTH_ERRORS = {"400": _EITHER, "401": _EITHER, "429": _THROTTLED}


class OAuthError(Exception):
    """An RFC 6749 section 5.2 error: its body is {error, error_description}."""

    def __init__(self, error, description, status=400, headers=None):
        super().__init__(description)
        self.error, self.description, self.status = error, description, status
        self.headers = headers or {}

    def reply(self):
        headers = {"Cache-Control": "no-store", **self.headers}
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Basic realm="appliance"'
        return Reply({"error": self.error, "error_description": self.description},
                     self.status, headers)


# a lifetime given as text: a plain decimal number (no sign, no exponent, no "_")
_SECONDS = re.compile(r"^[0-9]+(\.[0-9]*)?\Z|^\.[0-9]+\Z")


def _source_address(call):
    """The client's address: REMOTE_ADDR, which Waitress sets from X-Forwarded-For only
    for a request from the trusted proxy (the image's nginx on loopback; appliance/server.py)."""
    environ = call.request.environ if call.request is not None else {}
    return environ.get("REMOTE_ADDR") or ""


def _lifetime(body, name, maximum):
    """Seconds a token lives: any positive number (integer, decimal or a string of one),
    rounded up to a whole second and lowered to the server's maximum; absent: the maximum."""
    value = body.get(name)
    if value is None or value == "":
        return maximum
    if isinstance(value, str) and _SECONDS.match(value.strip()):
        value = float(value.strip())
    # NaN is the one value unequal to itself; huge ints and infinities compare fine
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value <= 0:
        raise OAuthError("invalid_request", f"{name} must be a positive number of seconds")
    return maximum if value >= maximum else math.ceil(value)


class Authenticator:
    # a kept answer's stamp covers them (appliance/api/answers.py)
    principal_kinds = PRINCIPAL_KINDS

    def __init__(self, api):
        self.api = api
        self.store = api.store
        self.signer = TokenSigner(api.store)
        self._cache = {}
        self._cache_key = None
        self._lock = threading.Lock()
        # token -> (the store's stamp of PRINCIPAL_KINDS before it was worked out, its principal)
        self._principals = {}
        # other capabilities' additions (the node agents, appliance/agent/enroll.py):
        # grant_type -> function(body) -> Reply, and claim -> function(claims) -> principal
        # for the tokens that carry that claim
        self.grants = {}
        self.principals = {}
        self.throttle = LoginThrottle(api.settings)

    def coll(self, kind):
        return self.store.collection(kind)

    # ---- permissions ---------------------------------------------------------------

    def permissions_of(self, user_uuid, project_id):
        generation = tuple(self.coll(k).snapshot().key for k in KINDS)
        with self._lock:
            if generation != self._cache_key:
                self._cache, self._cache_key = {}, generation
            cached = self._cache.get((user_uuid, project_id))
        if cached is not None:
            return cached
        names = set()
        perms = self.coll("iam_permissions")
        pbindings = self.coll("iam_permission_bindings")
        for binding in self.coll("iam_role_bindings").by("user", user_uuid):
            if binding.get("project") not in (None, project_id):
                continue
            for pb in pbindings.by("role", binding["role"]):
                permission = perms.get(pb["permission"])
                if permission is not None:
                    names.add(permission["name"])
        result = frozenset(names)
        with self._lock:
            if generation == self._cache_key:
                self._cache[(user_uuid, project_id)] = result
        return result

    def is_bound(self, user_uuid, project_id):
        return any(b.get("project") in (None, project_id)
                   for b in self.coll("iam_role_bindings").by("user", user_uuid))

    # ---- per request ---------------------------------------------------------------

    def __call__(self, request):
        # the raw value: Bottle's get_header() re-decodes it as UTF-8 and raises on other
        # bytes; a token is ASCII, so anything else is simply not a token
        environ = request.environ
        header = environ.get("HTTP_AUTHORIZATION", "")
        if not header:
            # the web console's session: the cookie stands for the header, and a write
            # must prove it comes from the console's own page (cookies.py)
            jar = cookies.read_cookies(environ)
            token = jar.get(cookies.SESSION_COOKIE)
            if token:
                cookies.check_csrf(environ, jar)
                if not token.isascii():
                    raise Unauthorized("the session cookie is not a token; log in again")
                return self.principal_of(token)
        if not header.isascii():
            raise Unauthorized("the Authorization header must be ASCII")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("a bearer token is required")
        return self.principal_of(token.strip())

    def principal_of(self, token):
        """The caller an access token stands for; 401 for any token that does not hold."""
        cached = self._principals.get(token)
        if cached is not None:
            # a token cached here verified as an access token: only its expiry moves, and
            # it is checked first, as TokenSigner.verify does
            stamp, principal = cached
            if principal.claims["exp"] <= time.time():
                raise Unauthorized("token expired")
            if self.store.unchanged(stamp):
                return principal
        try:
            claims = self.signer.verify(token, "access")
        except InvalidToken as e:
            raise Unauthorized(str(e)) from None
        for claim, principal in self.principals.items():
            if claim in claims:
                return principal(claims)
        # before the reads: a write during them leaves the entry stale, never wrong
        stamp = self.store.stamp(PRINCIPAL_KINDS)
        principal = self._principal(claims)
        with self._lock:
            if len(self._principals) >= PRINCIPAL_CACHE_SIZE:
                self._principals.clear()
            self._principals[token] = (stamp, principal)
        return principal

    def _principal(self, claims):
        if self.coll("iam_revoked_sessions").by("sid", claims["sid"]):
            raise Unauthorized("token revoked")
        user = self.coll("iam_users").get(claims["sub"])
        if user is None or user.get("status") != "ACTIVE":
            raise Unauthorized("token of an unknown or disabled user")
        if not survives_password_changes(claims, user):
            raise Unauthorized(PASSWORD_CHANGED)
        project_id = claims.get("project_id")
        if project_id is not None and self.coll("iam_projects").get(project_id) is None:
            raise Unauthorized("token scoped to a project that no longer exists")
        return Principal(user, project_id, self.permissions_of(user["uuid"], project_id), claims)

    # ---- the token endpoint --------------------------------------------------------

    def client(self, ref):
        if ref == "default":
            ref = builtin.DEFAULT_CLIENT
        return self.coll("iam_clients").get(ref.lower()) if UUID_RE.match(ref) else None

    def get_token(self, call):
        try:
            return self._get_token(call)
        except OAuthError as e:
            return e.reply()

    def _get_token(self, call):
        body = call.body if isinstance(call.body, dict) else {}
        if call.body is not None and not isinstance(call.body, dict):
            raise OAuthError("invalid_request", "body must be an object of parameters")
        client = self.client(call.params["client"])
        if client is None:
            raise OAuthError("invalid_client", "unknown client", 401)
        if body.get("grant_type") in self.grants:
            # such a grant authenticates its own client_id (an agent), not the path's
            return self.grants[body["grant_type"]](body)
        if client.get("secret_hash") and not passwords.verify(
                str(body.get("client_secret", "")), client["secret_hash"]):
            raise OAuthError("invalid_client", "client authentication failed", 401)
        grant = body.get("grant_type")
        if not grant:
            raise OAuthError("invalid_request", "grant_type is required")
        settings = self.api.settings
        ttl = _lifetime(body, "ttl", settings["token_ttl"])
        refresh_ttl = _lifetime(body, "refresh_ttl", settings["refresh_token_ttl"])
        environ = getattr(call.request, "environ", None)
        if grant in PASSWORD_GRANTS:
            user, project_id = self.password_login(call, body, PASSWORD_GRANTS[grant])
            session = str(uuidlib.uuid4())
        elif grant == "refresh_token":
            try:
                user, project_id, session = self._refresh_grant(body)
            except OAuthError:
                audit.note_login(environ, None, False)
                raise
            audit.note_login(environ, user.get("username"), True, user)
        else:
            raise OAuthError("unsupported_grant_type", f"grant_type {grant} is not supported")
        version = password_version(user)
        access, expires_at = self.signer.issue(user["uuid"], project_id, session, "access", ttl,
                                               password_version=version)
        refresh, _ = self.signer.issue(user["uuid"], project_id, session, "refresh",
                                       refresh_ttl, password_version=version)
        return Reply({"access_token": access, "token_type": "Bearer", "expires_in": ttl,
                      "expires_at": expires_at, "refresh_token": refresh,
                      "refresh_expires_in": refresh_ttl,
                      "scope": f"project:{project_id}" if project_id else ""},
                     200, {"Cache-Control": "no-store"})

    def password_login(self, call, body, name_field="username"):
        """(user, project_id) of a password login, throttled and audited: the token
        endpoint's password grants and the web console's login (appliance/console/) both
        go through here."""
        environ = getattr(call.request, "environ", None)
        # the audit trail gets the username tried and the outcome, never the password
        username = body.get(name_field)
        try:
            user, project_id = self._password_grant(body, name_field, _source_address(call))
        except OAuthError:
            audit.note_login(environ, username, False)
            raise
        audit.note_login(environ, username, True, user)
        return user, project_id

    def console_session(self, call, username, password, project_id):
        """A new session for the web console: (access token, expires_at, its principal).
        No refresh token: the console's session ends when its token does."""
        body = {"username": username, "password": password,
                "scope": f"project:{project_id}" if project_id else ""}
        user, project_id = self.password_login(call, body)
        token, expires_at = self.signer.issue(
            user["uuid"], project_id, str(uuidlib.uuid4()), "access",
            self.api.settings["token_ttl"], password_version=password_version(user))
        return token, expires_at, self.principal_of(token)

    def rescope(self, principal, project_id):
        """The same session moved to another project (or to none): (access token,
        expires_at, its principal). It ends when the session's token would have, so that
        switching projects never lengthens a session. OAuthError invalid_scope when the
        user is not bound in that project."""
        claims = principal.claims
        self._check_scope(principal.user, project_id)
        now = datetime.datetime.now(datetime.timezone.utc)
        ttl = max(1, int(claims["exp"] - now.timestamp()))
        token, expires_at = self.signer.issue(
            principal.user_uuid, project_id, claims["sid"], "access", ttl, now=now,
            password_version=claims.get("pwv", 0))
        return token, expires_at, self.principal_of(token)

    def _scope(self, body):
        scope = str(body.get("scope") or "").strip()
        if not scope:
            return None
        kind, _, value = scope.partition(":")
        if kind != "project" or not UUID_RE.match(value):
            raise OAuthError("invalid_scope", "scope must be empty or project:<uuid>")
        return value.lower()

    def _password_grant(self, body, name_field, address):
        username, password = body.get(name_field), body.get("password")
        if not isinstance(username, str) or not isinstance(password, str) or not username:
            raise OAuthError("invalid_request", f"{name_field} and password are required")
        project_id = self._scope(body)
        # before the user is even looked up: a known and an unknown username are
        # throttled alike (docs/iam.md, "Login throttling")
        try:
            self.throttle.begin(username, address)
        except Throttled as e:
            raise OAuthError("too_many_requests", "too many failed logins for this username "
                             f"or from this address; try again in {e.retry_after} s",
                             429, {"Retry-After": str(e.retry_after)}) from None
        user = self.coll("iam_users").find_one(username=username)
        encoded = user.get("password_hash") if user else None
        # the KDF runs whether or not the user exists: same answer, same time
        if not passwords.verify(password, encoded) or user.get("status") != "ACTIVE":
            self.throttle.failed(username, address)
            raise OAuthError("invalid_grant", "wrong username or password")
        self.throttle.succeeded(username, address)
        self._check_scope(user, project_id)
        return user, project_id

    def _check_scope(self, user, project_id):
        if project_id is None:
            return
        if self.coll("iam_projects").get(project_id) is None or not self.is_bound(
                user["uuid"], project_id):
            raise OAuthError("invalid_scope", "no such project for this user")

    def _refresh_grant(self, body):
        token = body.get("refresh_token")
        if not isinstance(token, str) or not token:
            raise OAuthError("invalid_request", "refresh_token is required")
        try:
            claims = self.signer.verify(token, "refresh")
        except InvalidToken as e:
            raise OAuthError("invalid_grant", str(e)) from None
        if self.coll("iam_revoked_sessions").by("sid", claims["sid"]):
            raise OAuthError("invalid_grant", "token revoked")
        user = self.coll("iam_users").get(claims["sub"])
        if user is None or user.get("status") != "ACTIVE":
            raise OAuthError("invalid_grant", "unknown or disabled user")
        if not survives_password_changes(claims, user):
            raise OAuthError("invalid_grant", PASSWORD_CHANGED)
        # a scope given with the refresh moves the session to that project (one the user
        # is bound in); none keeps the refreshed token's own
        project_id = self._scope(body) if body.get("scope") else claims.get("project_id")
        self._check_scope(user, project_id)
        return user, project_id, claims["sid"]

    # ---- introspection and logout --------------------------------------------------

    def introspect(self, call):
        p = call.principal
        user = {k: p.user.get(k) for k in ("uuid", "username", "first_name", "last_name",
                                           "email", "type", "status")}
        return {"user_info": user, "project_id": p.project_id,
                "permissions": sorted(p.permissions),
                "expires_at": format_time(datetime.datetime.fromtimestamp(
                    p.claims["exp"], datetime.timezone.utc)),
                "session": p.claims["sid"]}

    def me(self, call):
        """The reference's `me`: the caller's user record, the organizations of the
        projects it is bound in, and the token's project."""
        p = call.principal
        projects = self.coll("iam_projects")
        bound = (projects.get(b["project"]) for b in
                 self.coll("iam_role_bindings").by("user", p.user_uuid) if b.get("project"))
        org_ids = {project["organization"] for project in bound if project is not None}
        orgs = self.api.resources["/v1/iam/organizations"]
        return {"user": self.api.resources["/v1/iam/users"].render(p.user),
                "organization": [orgs.render(o) for o in orgs.collection().records()
                                 if o["uuid"] in org_ids],
                "project_id": p.project_id}

    def logout(self, call):
        claims = call.principal.claims
        now = format_time(datetime.datetime.now(datetime.timezone.utc))
        revoked = self.coll("iam_revoked_sessions")
        # a revoked session stays listed until its refresh token would have expired
        refresh_end = datetime.datetime.fromtimestamp(claims["iat"], datetime.timezone.utc) + \
            datetime.timedelta(seconds=self.api.settings["refresh_token_ttl"])
        revoked.delete_where(lambda r: r["expires_at"] < now)
        if not revoked.by("sid", claims["sid"]):
            revoked.insert({"sid": claims["sid"], "user": claims["sub"],
                            "expires_at": format_time(refresh_end)})
        return Reply(None, 204)


def register(api):
    auth = Authenticator(api)
    api.authenticate = auth
    base = "/v1/iam/clients/<client>/actions"
    api.route("POST", f"{base}/get_token/invoke", auth.get_token, permission=PUBLIC,
              accepts=(JSON, FORM), tag="iam", summary="Get a token (OAuth 2.0 grants "
              "password, login+password, refresh_token and client_credentials); errors as "
              "RFC 6749 section 5.2",
              request_schema={"type": "object", "properties": {
                  "grant_type": {"enum": [*PASSWORD_GRANTS, "refresh_token",
                                          "client_credentials"]},
                  "client_id": {"type": "string", "description": "grant client_credentials: "
                                                                 "a node agent's uuid"},
                  "username": {"type": "string"}, "password": {"type": "string"},
                  "login": {"type": "string", "description": "grant login+password: "
                                                             "the username"},
                  "refresh_token": {"type": "string"}, "scope": {"type": "string"},
                  "ttl": {"type": ["number", "string"], "description":
                          "seconds; any positive number, lowered to the server's maximum"},
                  "refresh_ttl": {"type": ["number", "string"], "description":
                                  "seconds; as ttl, for the refresh token"},
                  "client_secret": {"type": "string"}}},
              response_schema={"type": "object"}, error_schemas=OAUTH_ERRORS)
    # the caller's own token and user only: any valid token will do, a newcomer's too
    api.route("GET", f"{base}/introspect", auth.introspect, permission=AUTHENTICATED,
              tag="iam", summary="Who the token belongs to and what it may do",
              response_schema={"type": "object"})
    api.route("GET", f"{base}/me", auth.me, permission=AUTHENTICATED, tag="iam",
              summary="The caller's user, its organizations and the token's project",
              response_schema={"type": "object", "properties": {
                  "user": {"$ref": "#/components/schemas/User"},
                  "organization": {"type": "array", "items": {
                      "$ref": "#/components/schemas/Organization"}},
                  "project_id": {"type": ["string", "null"]}}})
    api.route("POST", f"{base}/logout/invoke", auth.logout, permission=AUTHENTICATED,
              tag="iam", summary="Revoke the token (and its refresh token)", status=204)
    return auth
