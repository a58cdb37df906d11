"""Who is calling: the token endpoint, introspection, logout and the authenticator that
every non-public route runs.

A caller's permissions are the permissions of the roles bound to it globally plus, for a
token scoped to a project, the roles bound to it in that project. They are computed once
per (user, project) and kept until any IAM kind involved changes.
"""

import datetime
import threading
import uuid as uuidlib

from appliance.api.errors import Unauthorized
from appliance.api.fields import UUID_RE
from appliance.api.routing import FORM, JSON, PUBLIC, Reply
from state import format_time

from . import builtin, passwords
from .permissions import Principal
from .tokens import InvalidToken, TokenSigner

KINDS = ("iam_role_bindings", "iam_permission_bindings", "iam_permissions")
# The grant's errors are RFC 6749's; a request that cannot be read as one at all (a body
# that is not JSON, a malformed header) is refused earlier with the API's Error body.
_EITHER = {"description": "OAuthError from the grant; Error when the request cannot be read",
           "anyOf": [{"$ref": "#/components/schemas/OAuthError"},
                     {"$ref": "#/components/schemas/Error"}]}
OAUTH_ERRORS = {"400": _EITHER, "401": _EITHER}


class OAuthError(Exception):
    """An RFC 6749 section 5.2 error: its body is {error, error_description}."""

    def __init__(self, error, description, status=400):
        super().__init__(description)
        self.error, self.description, self.status = error, description, status

    def reply(self):
        headers = {"Cache-Control": "no-store"}
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Basic realm="appliance"'
        return Reply({"error": self.error, "error_description": self.description},
                     self.status, headers)


class Authenticator:
    def __init__(self, api):
        self.api = api
        self.store = api.store
        self.signer = TokenSigner(api.store)
        self._cache = {}
        self._cache_key = None
        self._lock = threading.Lock()

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
        header = request.environ.get("HTTP_AUTHORIZATION", "")
        if not header.isascii():
            raise Unauthorized("the Authorization header must be ASCII")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("a bearer token is required")
        try:
            claims = self.signer.verify(token.strip(), "access")
        except InvalidToken as e:
            raise Unauthorized(str(e)) from None
        if self.coll("iam_revoked_sessions").by("sid", claims["sid"]):
            raise Unauthorized("token revoked")
        user = self.coll("iam_users").get(claims["sub"])
        if user is None or user.get("status") != "ACTIVE":
            raise Unauthorized("token of an unknown or disabled user")
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
        if client.get("secret_hash") and not passwords.verify(
                str(body.get("client_secret", "")), client["secret_hash"]):
            raise OAuthError("invalid_client", "client authentication failed", 401)
        grant = body.get("grant_type")
        if not grant:
            raise OAuthError("invalid_request", "grant_type is required")
        settings = self.api.settings
        ttl = settings["token_ttl"]
        if body.get("ttl") not in (None, ""):
            try:
                ttl = int(body["ttl"])
            except (TypeError, ValueError):
                raise OAuthError("invalid_request", "ttl must be an integer") from None
            if not 1 <= ttl <= settings["token_ttl"]:
                raise OAuthError("invalid_request",
                                 f"ttl must be between 1 and {settings['token_ttl']}")
        if grant == "password":
            user, project_id = self._password_grant(body)
            session = str(uuidlib.uuid4())
        elif grant == "refresh_token":
            user, project_id, session = self._refresh_grant(body)
        else:
            raise OAuthError("unsupported_grant_type", f"grant_type {grant} is not supported")
        access, expires_at = self.signer.issue(user["uuid"], project_id, session, "access", ttl)
        refresh_ttl = settings["refresh_token_ttl"]
        refresh, _ = self.signer.issue(user["uuid"], project_id, session, "refresh",
                                       refresh_ttl)
        return Reply({"access_token": access, "token_type": "Bearer", "expires_in": ttl,
                      "expires_at": expires_at, "refresh_token": refresh,
                      "refresh_expires_in": refresh_ttl,
                      "scope": f"project:{project_id}" if project_id else ""},
                     200, {"Cache-Control": "no-store"})

    def _scope(self, body):
        scope = str(body.get("scope") or "").strip()
        if not scope:
            return None
        kind, _, value = scope.partition(":")
        if kind != "project" or not UUID_RE.match(value):
            raise OAuthError("invalid_scope", "scope must be empty or project:<uuid>")
        return value.lower()

    def _password_grant(self, body):
        username, password = body.get("username"), body.get("password")
        if not isinstance(username, str) or not isinstance(password, str) or not username:
            raise OAuthError("invalid_request", "username and password are required")
        project_id = self._scope(body)
        user = self.coll("iam_users").find_one(username=username)
        encoded = user.get("password_hash") if user else None
        # the KDF runs whether or not the user exists: same answer, same time
        if not passwords.verify(password, encoded) or user.get("status") != "ACTIVE":
            raise OAuthError("invalid_grant", "wrong username or password")
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
        self._check_scope(user, claims.get("project_id"))
        return user, claims.get("project_id"), claims["sid"]

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
              "password and refresh_token); errors as RFC 6749 section 5.2",
              request_schema={"type": "object", "properties": {
                  "grant_type": {"enum": ["password", "refresh_token"]},
                  "username": {"type": "string"}, "password": {"type": "string"},
                  "refresh_token": {"type": "string"}, "scope": {"type": "string"},
                  "ttl": {"type": ["integer", "string"]},
                  "client_secret": {"type": "string"}}},
              response_schema={"type": "object"}, error_schemas=OAUTH_ERRORS)
    api.route("GET", f"{base}/introspect", auth.introspect,
              permission="iam.client.introspect", tag="iam",
              summary="Who the token belongs to and what it may do",
              response_schema={"type": "object"})
    api.route("POST", f"{base}/logout/invoke", auth.logout, permission="iam.client.logout",
              tag="iam", summary="Revoke the token (and its refresh token)", status=204)
    return auth
