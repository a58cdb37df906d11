"""The client of the realm mirror's upstream DNS API (spec 2.8): another appliance's API,
or any API of the same shape.

Three layers, each small enough to read alone: `JsonTransport` sends one JSON request over
urllib and hands back the status and body; `TokenSession` holds the token (password grant
at <mirror_url>/v1/iam/clients/default/actions/get_token/invoke, refreshed by the refresh
grant, else the password grant again, before it expires and once more on a 401);
`Upstream` is the DNS API on top: the mirror's domain and its records.
"""

import base64
import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from appliance.kinds import ADMIN_PROJECT  # noqa: E402
TOKEN_PATH = "/v1/iam/clients/default/actions/get_token/invoke"
DOMAINS = "/v1/dns/domains"
TIMEOUT_SECONDS = 10.0
TOKEN_MARGIN_SECONDS = 30.0


class UpstreamError(Exception):
    """An upstream call that did not succeed. `status` is the HTTP status, None when no
    answer came at all (refused connection, timeout, broken response)."""

    def __init__(self, message, status=None, body=None):
        super().__init__(message)
        self.message, self.status, self.body = message, status, body

    @property
    def detail(self):
        """The upstream's own words (its error message), else the whole message."""
        return error_message(self.status, self.body) if self.body else self.message

    @property
    def failure(self):
        """The upstream itself failed (5xx or no answer): retry later, never a refusal."""
        return self.status is None or self.status >= 500

    @property
    def refusal(self):
        """A 400 to the request itself (for the tag filter: the query is not supported)."""
        return self.status == 400


class AuthError(UpstreamError):
    """Login at the upstream failed (wrong credentials, no credentials). Always a failure
    of the pass, whatever its status: a 400 invalid_grant is not a filter refusal."""

    @property
    def refusal(self):
        return False


def decode(raw):
    """A body as JSON, else as the start of its text; None when empty."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:200]


def error_message(status, body):
    """The message of an error body (ours, or OAuth 2.0's), else the start of the body."""
    if isinstance(body, dict):
        text = body.get("message") or body.get("error_description") or body.get("error")
        if text:
            return str(text)
    return str(body)[:200] if body else f"HTTP {status}"


class JsonTransport:
    """One JSON request to the upstream: (status, raw body) of any answer; UpstreamError
    only when no answer came."""

    def __init__(self, url, timeout):
        self.url = (url or "").rstrip("/")
        self.timeout = timeout
        self._opener = urllib.request.build_opener()

    def _send(self, method, path, body=None, query=None, token=None):
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        headers = {"Accept": "application/json", "User-Agent": "appliance-mirror"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                e.close()
            return e.code, raw
        except urllib.error.URLError as e:
            raise UpstreamError(f"cannot reach the upstream {self.url}: {e.reason}") from None
        except (OSError, http.client.HTTPException, socket.timeout) as e:
            raise UpstreamError(f"cannot reach the upstream {self.url}: "
                                f"{type(e).__name__}: {e}") from None


def login_failure(status, body, username):
    """The error of a token request that gave no token."""
    if status is not None and status >= 500:
        return UpstreamError(f"upstream token endpoint failed ({status}): "
                             f"{error_message(status, body)}", status, body)
    what = body.get("error", "") if isinstance(body, dict) else ""
    return AuthError(f"login at the upstream as {username!r} failed ({status}"
                     f"{' ' + what if what else ''}): {error_message(status, body)}",
                     status, body)


class TokenSession(JsonTransport):
    """The upstream's token for the mirror's credentials, kept valid."""

    def __init__(self, url, username, password, *, scope="", timeout=TIMEOUT_SECONDS,
                 clock=time.monotonic):
        super().__init__(url, timeout)
        self.username, self._password = username, password
        self.scope = scope or ""
        self.clock = clock
        self._access, self._access_until = None, 0.0
        self._refresh, self._refresh_until = None, 0.0
        self.project_id = None

    def _grant(self, params):
        status, raw = self._send("POST", TOKEN_PATH, params)
        body = decode(raw)
        if status != 200 or not isinstance(body, dict) or "access_token" not in body:
            raise login_failure(status, body, self.username)
        now = self.clock()
        expires_in = float(body.get("expires_in") or 300)
        self._access = body["access_token"]
        self._access_until = now + expires_in - min(TOKEN_MARGIN_SECONDS, expires_in / 5)
        self._refresh = body.get("refresh_token")
        refresh_in = float(body.get("refresh_expires_in") or 0)
        self._refresh_until = now + refresh_in - min(TOKEN_MARGIN_SECONDS, refresh_in / 5)
        self.project_id = project_of(body) or ADMIN_PROJECT
        return self._access

    def token(self):
        """A valid access token: the cached one, else refreshed, else a new login."""
        now = self.clock()
        if self._access and now < self._access_until:
            return self._access
        if self._refresh and now < self._refresh_until:
            try:
                return self._grant({"grant_type": "refresh_token",
                                    "refresh_token": self._refresh})
            except AuthError:
                pass          # revoked or expired early: log in again
        if not self.username or self._password is None:
            raise AuthError("mirror_username and mirror_password are not set")
        params = {"grant_type": "password", "username": self.username,
                  "password": self._password}
        if self.scope:
            params["scope"] = self.scope
        return self._grant(params)

    def forget_token(self):
        self._access, self._access_until = None, 0.0


class Upstream(TokenSession):
    """The upstream DNS API: the mirror's domain and its records."""

    def __repr__(self):
        return f"<Upstream {self.url} as {self.username}>"

    def call(self, method, path, body=None, query=None):
        """The decoded answer of a 2xx; UpstreamError otherwise. A 401 gets one new login."""
        for attempt in (1, 2):
            status, raw = self._send(method, path, body, query, self.token())
            if status == 401 and attempt == 1:
                self.forget_token()
                self._refresh = None
                continue
            break
        decoded = decode(raw)
        if not 200 <= status < 300:
            raise UpstreamError(f"upstream {method} {path} answered {status}: "
                                f"{error_message(status, decoded)}", status, decoded)
        return decoded

    def find_domain(self, name):
        """The upstream domain `name` of the mirror's own project, or None (see
        own_domain)."""
        found = self.call("GET", DOMAINS + "/", query={"name": name})
        return own_domain(found, name, self.project_id)

    def ensure_domain(self, name):
        """The upstream domain of this name, created when missing; (domain, created)."""
        return domain_made_if_missing(self, name)

    def list_records(self, domain_uuid, tag=None):
        query = {"q": f'tags:"{tag}"'} if tag is not None else None
        found = self.call("GET", records_path(domain_uuid) + "/", query=query)
        if not isinstance(found, list):
            raise UpstreamError(f"record listing of domain {domain_uuid} is not a list", 502)
        return found

    def get_record(self, domain_uuid, uuid):
        return self.call("GET", f"{records_path(domain_uuid)}/{uuid}")

    def create_record(self, domain_uuid, body):
        return self.call("POST", records_path(domain_uuid) + "/", body)

    def update_record(self, domain_uuid, uuid, changes):
        return self.call("PUT", f"{records_path(domain_uuid)}/{uuid}", changes)

    def delete_record(self, domain_uuid, uuid):
        return self.call("DELETE", f"{records_path(domain_uuid)}/{uuid}")


def domain_made_if_missing(upstream, name):
    """Upstream.ensure_domain: the upstream domain of this name, created when missing;
    (domain, created)."""
    domain = upstream.find_domain(name)
    if domain is not None:
        return domain, False
    upstream.token()          # so that project_id is known
    try:
        return upstream.call("POST", DOMAINS + "/", {
            "name": name, "project_id": upstream.project_id}), True
    except UpstreamError as e:
        if e.status != 409:
            raise
        refused = e
    domain = upstream.find_domain(name)      # created meanwhile by someone else
    if domain is None:
        # the upstream's own zone rule (a zone of another owner covers the name), or
        # a domain of that name the mirror's credentials cannot see
        raise UpstreamError(f"the upstream refused domain {name}: {refused.detail}",
                            409, refused.body)
    return domain, False


def records_path(domain_uuid):
    return f"{DOMAINS}/{domain_uuid}/records"


def own_domain(found, name, project_id):
    """The domain `name` among a listing, or None. One of another project (an admin's
    credentials see every project's) is never written into: UpstreamError 409. An
    upstream that shows no project_id cannot tell."""
    for domain in found or ():
        if not isinstance(domain, dict):
            continue
        if str(domain.get("name", "")).rstrip(".").lower() == name:
            owner = domain.get("project_id")
            if owner is not None and project_id is not None and owner != project_id:
                raise UpstreamError(
                    f"the upstream domain {name} belongs to project {owner}, not to "
                    f"the mirror's project {project_id}: a zone has one owner, "
                    "so the mirror does not write into it", 409)
            return domain
    return None


def project_of(token_body):
    """The project a token is scoped to: its `scope`, else its `project_id` claim."""
    scope = token_body.get("scope") or ""
    if scope.startswith("project:"):
        return scope.split(":", 1)[1]
    try:
        payload = token_body["access_token"].split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return claims.get("project_id")
    except (KeyError, IndexError, ValueError, AttributeError):
        return None


def extra_setting(settings, key):
    """A mirror setting that appliance/config.py may not declare: the setting when present,
    else the APPLIANCE_<KEY> variable, else None."""
    value = settings.get(key)
    if value in (None, ""):
        value = os.environ.get("APPLIANCE_" + key.upper())
    return None if value in (None, "") else value


def upstream_from_settings(settings):
    """The client for the configured upstream, or None when the mirror is not configured."""
    if not settings.get("mirror_url"):
        return None
    return Upstream(settings["mirror_url"], settings.get("mirror_username"),
                    settings.get("mirror_password"),
                    scope=extra_setting(settings, "mirror_scope") or "")
