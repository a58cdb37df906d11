"""The one guarded fetcher: every URL a project chose is fetched through `open_url`
(docs/security.md, "Addresses a project may reach, and the guarded fetcher").

A daemon that fetches a project's URL (the compute daemon's image, the builder's
repository, the node agent's LB archive) does so from the appliance's side of every
network. So the host is resolved **once**, every address it resolves to is checked with
the address rule (`addresses.Reach`), and the connection is made to the checked address
itself, while the Host header and TLS (SNI and the certificate check) use the name: a
DNS answer that changes between the check and the connection (rebinding) cannot move it.
Redirects go through the same check, a bounded number of times. Size and time are
bounded: a byte limit and one deadline over the whole fetch, redirects included.
No proxy is ever used (a proxy would connect on our behalf, unchecked).

Stdlib only: the node agent imports this module.
"""

import os
import socket
import time
import urllib.parse

from .addresses import PLATFORM, parse_address

MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)
DEFAULT_TIMEOUT = 30.0


class FetchError(Exception):
    """The URL cannot be fetched (unreachable, an HTTP error, too large, too slow); the
    message says why."""


class Refused(FetchError):
    """The URL's destination is one the caller may not reach; `reason` says why."""

    def __init__(self, url, reason):
        self.url, self.reason = url, reason
        super().__init__(f"{_shown(url)}: refused: {reason}")


def _shown(url):
    """The URL without credentials, for messages."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return repr(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def default_resolver(host, port):
    """[address text] of `host`, from the system's resolver, once."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


# tests point this at a resolver of their own (a name that "rebinds"); None = the default
resolver = None


def split_url(url, reach=PLATFORM):
    """(scheme, host, port, parts) of an http(s) URL (file:// only for the platform);
    Refused or FetchError otherwise."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except (ValueError, TypeError):
        raise FetchError(f"{_shown(url)}: not a URL") from None
    scheme = parts.scheme.lower()
    if scheme == "file":
        if not reach.platform:
            raise Refused(url, "file:// URLs are for the platform only")
        return scheme, None, None, parts
    if scheme not in ("http", "https"):
        raise Refused(url, f"unsupported URL scheme {scheme!r}: only http and https")
    if not parts.hostname:
        raise FetchError(f"{_shown(url)}: no host")
    return scheme, parts.hostname, port or (443 if scheme == "https" else 80), parts


def literal_refusal(url, reach):
    """The reason why `url` is refused when that shows without resolving (its host is an
    IP literal the rule refuses, or its scheme is not allowed), else None: for a 400 at
    create time. A host name is judged when it is fetched."""
    try:
        scheme, host, _, _ = split_url(url, reach)
    except Refused as e:
        return e.reason
    except FetchError:
        return None             # malformed: the caller's own checks say so
    if scheme == "file" or reach.platform:
        return None
    address = parse_address(host)
    return None if address is None else reach.refusal(address)


def checked_addresses(url, reach, resolve=None):
    """(scheme, host, port, parts, [address]) with every address the host resolves to
    allowed; Refused when any is not (a name may not mix an allowed address with a
    refused one), FetchError when the name does not resolve."""
    scheme, host, port, parts = split_url(url, reach)
    if scheme == "file":
        return scheme, host, port, parts, []
    literal = parse_address(host)
    if literal is not None:
        found = [str(literal)]
    else:
        try:
            found = (resolve or resolver or default_resolver)(host, port)
        except (OSError, UnicodeError) as e:
            raise FetchError(f"{_shown(url)}: cannot resolve {host}: "
                             f"{getattr(e, 'strerror', None) or e}") from None
        if not found:
            raise FetchError(f"{_shown(url)}: {host} resolves to no address")
    for address in found:
        why = reach.refusal(address)
        if why:
            if literal is None:
                why = f"{host} resolves to {why}"
            raise Refused(url, why)
    return scheme, host, port, parts, found


def check_url(url, reach, resolve=None):
    """Refused / FetchError unless `url` may be fetched now (resolved and checked)."""
    checked_addresses(url, reach, resolve)


_classes = {}


def _connection_classes():
    """(HTTP, HTTPS) connection classes to one checked address that speak to the name
    (Host header, SNI and the certificate check). Made on first use: http.client and
    ssl (a few MB of libssl) are loaded only by a process that fetches."""
    if _classes:
        return _classes["http"], _classes["https"]
    import http.client  # noqa: PLC0415

    class PinnedHTTP(http.client.HTTPConnection):
        def __init__(self, host, port, address, timeout):
            super().__init__(host, port, timeout=timeout)
            self.address = address

        def connect(self):
            self.sock = socket.create_connection((self.address, self.port), self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    class PinnedHTTPS(http.client.HTTPSConnection):
        def __init__(self, host, port, address, timeout, context):
            super().__init__(host, port, timeout=timeout, context=context)
            self.address = address

        def connect(self):
            sock = socket.create_connection((self.address, self.port), self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host)

    _classes.update(http=PinnedHTTP, https=PinnedHTTPS)
    return PinnedHTTP, PinnedHTTPS


def _errors():
    import http.client  # noqa: PLC0415
    return (OSError, http.client.HTTPException)


class Response:
    """A fetched body, read within the byte limit and the deadline. `url` is where it
    came from (after redirects), `status` and `headers` the server's."""

    def __init__(self, url, status, headers, body, connection, max_bytes, deadline,
                 timeout):
        self.url, self.status, self.headers = url, status, headers
        self._body, self._conn = body, connection
        self.max_bytes, self.deadline, self.timeout = max_bytes, deadline, timeout
        self.read_bytes = 0

    def read(self, n=-1):
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(f"{_shown(self.url)}: took longer than its time limit")
        if self._conn is not None and self._conn.sock is not None:
            self._conn.sock.settimeout(min(self.timeout, remaining))
        if n is None or n < 0:
            n = self.max_bytes - self.read_bytes + 1 if self.max_bytes else -1
        elif self.max_bytes:
            n = min(n, self.max_bytes - self.read_bytes + 1)
        try:
            data = self._body.read(n) if n != -1 else self._body.read()
        except _errors() as e:
            if time.monotonic() >= self.deadline:
                raise FetchError(f"{_shown(self.url)}: took longer than its time "
                                 "limit") from None
            raise FetchError(f"{_shown(self.url)}: {e or type(e).__name__}") from None
        self.read_bytes += len(data)
        if self.max_bytes and self.read_bytes > self.max_bytes:
            raise FetchError(f"{_shown(self.url)}: larger than its limit of "
                             f"{self.max_bytes} bytes")
        if time.monotonic() > self.deadline:
            raise FetchError(f"{_shown(self.url)}: took longer than its time limit")
        return data

    def close(self):
        try:
            self._body.close()
        finally:
            if self._conn is not None:
                self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_url(url, reach, max_bytes, deadline_seconds, timeout=DEFAULT_TIMEOUT,
             headers=None, max_redirects=MAX_REDIRECTS, context=None, resolve=None):
    """A Response of `url` fetched for `reach` (addresses.Reach: a project's, or
    PLATFORM). `max_bytes` bounds the body (0: no bound), `deadline_seconds` the whole
    fetch, `timeout` one socket wait. Raises Refused (the destination or a redirect's is
    not allowed) or FetchError (anything else: HTTP >= 400, too big, too slow)."""
    deadline = time.monotonic() + deadline_seconds
    headers = dict(headers or {})
    for _ in range(max_redirects + 1):
        scheme, host, port, parts, found = checked_addresses(url, reach, resolve)
        if scheme == "file":
            return _open_file(url, parts, max_bytes, deadline, timeout)
        conn, response = _request(url, scheme, host, port, parts, found, headers,
                                  deadline, timeout, context)
        if response.status in REDIRECTS and response.getheader("Location"):
            location = response.getheader("Location")
            response.close()
            conn.close()
            next_url = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(next_url).hostname != host:
                headers.pop("Authorization", None)      # credentials stay with their host
            if urllib.parse.urlsplit(next_url).scheme.lower() not in ("http", "https"):
                raise Refused(next_url, "a redirect may lead only to http or https")
            url = next_url
            continue
        if response.status >= 400:
            reason = response.reason
            response.close()
            conn.close()
            raise FetchError(f"{_shown(url)}: HTTP {response.status} {reason}")
        length = response.getheader("Content-Length")
        if max_bytes and length and length.isdigit() and int(length) > max_bytes:
            response.close()
            conn.close()
            raise FetchError(f"{_shown(url)}: {length} bytes is more than its limit of "
                             f"{max_bytes} bytes")
        return Response(url, response.status, response.headers, response, conn, max_bytes,
                        deadline, timeout)
    raise FetchError(f"{_shown(url)}: more than {max_redirects} redirects")


def _request(url, scheme, host, port, parts, found, headers, deadline, timeout, context):
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    last = None
    for address in found:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(f"{_shown(url)}: took longer than its time limit")
        wait = min(timeout, remaining)
        pinned_http, pinned_https = _connection_classes()
        if scheme == "https":
            import ssl  # noqa: PLC0415
            conn = pinned_https(host, port, address, wait,
                                context or ssl.create_default_context())
        else:
            conn = pinned_http(host, port, address, wait)
        try:
            conn.putrequest("GET", path, skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            return conn, conn.getresponse()
        except _errors() as e:
            conn.close()
            last = e
    reason = getattr(last, "strerror", None) or last or "no address"
    raise FetchError(f"{_shown(url)}: cannot download: cannot connect: {reason}")


def _open_file(url, parts, max_bytes, deadline, timeout):
    path = urllib.parse.unquote(parts.path)
    try:
        body = open(path, "rb")     # noqa: SIM115 (closed by Response.close)
        size = os.fstat(body.fileno()).st_size
    except OSError as e:
        raise FetchError(f"{_shown(url)}: {e.strerror or e}") from None
    if max_bytes and size > max_bytes:
        body.close()
        raise FetchError(f"{_shown(url)}: {size} bytes is more than its limit of "
                         f"{max_bytes} bytes")
    return Response(url, 200, {}, body, None, max_bytes, deadline, timeout)


def fetch_bytes(url, reach, max_bytes, deadline_seconds, **kwargs):
    """The whole body of `url` (see open_url)."""
    with open_url(url, reach, max_bytes, deadline_seconds, **kwargs) as response:
        chunks = []
        while chunk := response.read(1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
