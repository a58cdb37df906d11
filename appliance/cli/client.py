"""HTTP client for the appliance API, on the standard library's urllib.

The transport is a plain callable so tests (and `Environment`) can swap it; everything above it
(paths, bearer token, transparent refresh, error bodies, marker paging) is plain Python.
"""

from __future__ import annotations

import dataclasses
import http
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Iterator, Mapping, Protocol, Sequence

from appliance import __version__
from appliance.cli import CliError, ExitStatus, NotLoggedIn, UsageError
from appliance.cli.session import Session
from appliance.cli.trust import (INSECURE_WARNING, CertificateMismatch, Trust,
                                 UntrustedCertificate, changed_message, https_handler,
                                 mismatch_message)

TOKEN_PATH = "/v1/iam/clients/default/actions/get_token/invoke"
INTROSPECT_PATH = "/v1/iam/clients/default/actions/introspect"
LOGOUT_PATH = "/v1/iam/clients/default/actions/logout/invoke"

MARKER_HEADER = "x-pagination-marker"
USER_AGENT = f"appliance-cli/{__version__}"

Query = Sequence[tuple[str, str]]


@dataclasses.dataclass
class HttpResponse:
    status: int
    headers: Mapping[str, str]  # names lower-cased
    body: bytes

    def payload(self):
        """The decoded JSON, the text when it is not JSON, None when there is no body."""
        if not self.body.strip():
            return None
        text = self.body.decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text


class Transport(Protocol):
    """Sends one request. `trust` (appliance.cli.trust.Trust) says which certificates an
    https URL may present; ApiClient passes it only when the session has one, so a plain
    http session calls the transport exactly as before."""

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float,
        *, trust: Trust | None = None,
    ) -> HttpResponse: ...


class Unreachable(CliError):
    exit_status = ExitStatus.UNREACHABLE


class ApiError(CliError):
    """The server answered with an error status; `message` is the server's own words."""

    def __init__(self, status: int, error_type: str | None, message: str):
        exit_status = ExitStatus.SERVER_ERROR if status >= 500 else ExitStatus.CLIENT_ERROR
        super().__init__(message, exit_status)
        self.status = status
        self.error_type = error_type


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    # urllib would follow a redirect carrying our Authorization header to wherever it points,
    # and turn a POST into a GET on the way. The API never redirects, so a redirect is an error.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class UrllibTransport:
    def __init__(self, proxies: Mapping[str, str] | None = None):
        """`proxies=None` honours the usual *_proxy variables; `{}` disables proxies."""
        self._proxies = proxies
        self._openers: dict[Trust | None, urllib.request.OpenerDirector] = {}

    def _opener(self, trust: Trust | None) -> urllib.request.OpenerDirector:
        if trust not in self._openers:
            handlers: list[urllib.request.BaseHandler] = [_RefuseRedirects()]
            if self._proxies is not None:
                handlers.append(urllib.request.ProxyHandler(dict(self._proxies)))
            if trust is not None:
                handlers.append(https_handler(trust))
            self._openers[trust] = urllib.request.build_opener(*handlers)
        return self._openers[trust]

    def __call__(self, method, url, headers, body, timeout, *, trust: Trust | None = None) -> HttpResponse:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
        try:
            try:
                reply = self._opener(trust).open(request, timeout=timeout)
            except urllib.error.HTTPError as error_reply:
                reply = error_reply  # an error status is still an answer; callers decode it
            with reply:
                status = reply.status if reply.status is not None else reply.code
                headers = {name.lower(): value for name, value in reply.headers.items()}
                return HttpResponse(status, headers, reply.read())
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise Unreachable(describe_unreachable(url, exc, timeout)) from None


def describe_unreachable(url: str, exc: Exception, timeout: float) -> str:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ssl.SSLCertVerificationError):
        parts = urllib.parse.urlsplit(url)
        endpoint = f"{parts.scheme}://{parts.netloc}"
        return (f"the certificate of {endpoint} is not trusted "
                f"({reason.verify_message or reason}); if it is the appliance's own, pin the "
                f"fingerprint its console shows: appliance login --endpoint {endpoint} "
                "--fingerprint SHA256:... (see `appliance login --help`)")
    if isinstance(reason, TimeoutError):
        what = f"timed out after {timeout:g}s"
    elif isinstance(reason, ConnectionRefusedError):
        what = "connection refused"
    elif isinstance(reason, socket.gaierror):
        what = f"cannot resolve host ({reason.strerror})"
    elif isinstance(reason, ssl.SSLError):
        what = f"TLS failed ({reason.reason or reason})"
    elif isinstance(reason, OSError) and reason.strerror:
        what = reason.strerror
    else:
        what = str(reason) or type(reason).__name__
    parts = urllib.parse.urlsplit(url)
    return f"cannot reach {parts.scheme}://{parts.netloc}: {what}"


def error_from_response(response: HttpResponse) -> ApiError:
    data = response.payload()
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return ApiError(response.status, data.get("type"), data["message"])
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        # OAuth 2.0 (RFC 6749 5.2) shape, used by the token endpoint.
        description = data.get("error_description")
        message = f"{data['error']}: {description}" if description else data["error"]
        return ApiError(response.status, data["error"], message)
    if 300 <= response.status < 400:
        target = response.headers.get("location", "?")
        return ApiError(response.status, None, f"unexpected redirect ({response.status}) to {target}")
    try:
        phrase = http.HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    message = f"HTTP {response.status} {phrase}".rstrip()
    if isinstance(data, str):
        first_line = data.strip().splitlines()[0][:200]
        message = f"{message}: {first_line}"
    return ApiError(response.status, None, message)


def normalize_endpoint(raw: str) -> str:
    endpoint = raw.strip().rstrip("/")
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise UsageError(f"endpoint must be an http(s) URL like http://127.0.0.1:11010, not {raw!r}")
    return endpoint


def api_path(raw: str, *, collection: bool) -> str:
    """`iam/users`, `/v1/iam/users/`, `v1/iam/users` all name `/v1/iam/users/`.

    Collections get the trailing slash of the conventions' canonical form, items none.
    """
    text = raw.strip()
    if "://" in text:
        raise UsageError(f"give an API path like iam/users, not a URL ({raw!r}); use --endpoint for the server")
    if "?" in text or "#" in text:
        raise UsageError(f"path {raw!r} has a query; use --filter, --sort, --limit instead")
    segments = [segment for segment in text.split("/") if segment]
    if segments and segments[0] == "v1":
        segments = segments[1:]
    if not segments:
        raise UsageError(f"path {raw!r} names no resource; try e.g. iam/users")
    if any(segment in (".", "..") for segment in segments):
        raise UsageError(f"path {raw!r} may not contain . or .. segments")
    path = "/v1/" + "/".join(urllib.parse.quote(segment, safe="") for segment in segments)
    return path + "/" if collection else path


class ApiClient:
    """One command's conversation with the API.

    Refreshes the access token at most once per command: up front when the session says it
    has expired, or after a 401 (the server may have expired it early); then the request is
    retried once. A refused refresh means the user must log in again.
    """

    def __init__(
        self,
        endpoint: str,
        transport: Transport,
        timeout: float,
        clock: Callable[[], float],
        session: Session | None = None,
        on_session_change: Callable[[Session], None] | None = None,
        *,
        trust: Trust | None = None,
        warn: Callable[[str], None] | None = None,
        pinning: bool = False,
    ):
        """`trust` defaults to the session's; `warn` receives warnings (the --insecure one,
        before the first request); `pinning` says the pin was given at this login, not kept
        in a session (another message when the server does not match)."""
        self.endpoint = endpoint
        self.transport = transport
        self.timeout = timeout
        self.clock = clock
        self.session = session
        self.on_session_change = on_session_change
        self.trust = trust if trust is not None else (session.trust if session is not None else None)
        self.warn = warn
        self.pinning = pinning
        self._warned = False
        self._refreshed = False

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body=None,
        authenticated: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        """`headers`: more request headers (the event stream's Last-Event-ID)."""
        token = self._usable_access_token() if authenticated else None
        response = self._send(method, path, query, body, token, headers)
        if response.status == 401 and authenticated and self._may_refresh():
            self._refresh()
            response = self._send(method, path, query, body, self.session.access_token,
                                  headers)
        if response.status == 401 and authenticated:
            error = error_from_response(response)
            raise NotLoggedIn(f"{error.message} (run `appliance login`)")
        if response.status >= 300:
            raise error_from_response(response)
        return response

    def get_token(self, grant: Mapping[str, str]) -> dict:
        data = self.request("POST", TOKEN_PATH, body=dict(grant), authenticated=False).payload()
        if not isinstance(data, dict) or not isinstance(data.get("access_token"), str):
            raise ApiError(502, None, "the token endpoint answered without an access_token")
        return data

    def iter_pages(self, path: str, query: Query, page_limit: int, marker: str | None = None) -> Iterator[list]:
        """Follow X-Pagination-Marker until the server stops sending one."""
        seen_markers: set[str] = set()
        while True:
            page_query = [*query, ("page_limit", str(page_limit))]
            if marker:
                page_query.append(("page_marker", marker))
            response = self.request("GET", path, query=page_query)
            items = response.payload()
            if not isinstance(items, list):
                raise ApiError(502, None, f"expected a list from {path}, got {type(items).__name__}")
            yield items
            marker = response.headers.get(MARKER_HEADER)
            if not marker or not items:
                return
            if marker in seen_markers:
                raise ApiError(502, None, f"the server repeated page marker {marker}; stopping")
            seen_markers.add(marker)

    def _send(self, method, path, query, body, token, extra=None) -> HttpResponse:
        url = self.endpoint + path
        if query:
            url += "?" + urllib.parse.urlencode(list(query))
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **(extra or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self.trust is None or not self.endpoint.startswith("https:"):
            return self.transport(method, url, headers, data, self.timeout)
        if self.trust.insecure and not self._warned and self.warn is not None:
            self._warned = True
            self.warn(INSECURE_WARNING.format(endpoint=self.endpoint))
        try:
            return self.transport(method, url, headers, data, self.timeout, trust=self.trust)
        except CertificateMismatch as exc:
            describe = mismatch_message if self.pinning else changed_message
            raise UntrustedCertificate(describe(self.endpoint, exc.pinned, exc.served)) from None

    def _usable_access_token(self) -> str:
        if self.session is None:
            raise NotLoggedIn("not logged in; run `appliance login`")
        now = self.clock()
        if self.session.access_expired(now):
            if not self._may_refresh():
                raise NotLoggedIn("session expired; run `appliance login`")
            self._refresh()
        return self.session.access_token

    def _may_refresh(self) -> bool:
        return (
            not self._refreshed and self.session is not None and self.session.can_refresh(self.clock())
        )

    def _refresh(self) -> None:
        self._refreshed = True
        grant = {"grant_type": "refresh_token", "refresh_token": self.session.refresh_token}
        try:
            tokens = self.get_token(grant)
        except ApiError as exc:
            if exc.exit_status == ExitStatus.CLIENT_ERROR:
                raise NotLoggedIn(
                    f"session expired and could not be renewed ({exc.message}); run `appliance login`"
                ) from None
            raise
        self.session = self.session.with_tokens(tokens, self.clock())
        if self.on_session_change is not None:
            self.on_session_change(self.session)
