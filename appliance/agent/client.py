"""The agent's HTTP client: a bearer token from the grant client_credentials, taken again
on a 401; one keep-alive connection per thread (the long poll and the reports do not
share one). Stdlib only: the agent must stay small (docs/agent.md, "Footprint")."""

import http.client
import json
import ssl
import threading
import urllib.parse

TOKEN_PATH = "/v1/iam/clients/default/actions/get_token/invoke"


class Unreachable(Exception):
    """The API cannot be reached or answered 5xx: keep the state, retry later."""


class Refused(Exception):
    """The API refused (4xx other than a 401 cured by a new token)."""

    def __init__(self, status, body):
        message = body.get("message") or body.get("error_description") \
            if isinstance(body, dict) else None
        super().__init__(f"{status}: {message or body}")
        self.status, self.body = status, body


class AgentClient:
    def __init__(self, endpoint, agent, secret, timeout=10.0, ca=None):
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"endpoint {endpoint!r} is not an http(s) URL")
        self.endpoint = endpoint
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname, url.port
        self._prefix = url.path.rstrip("/")
        self.agent, self._secret = agent, secret
        self.timeout = timeout
        self._context = ssl.create_default_context(cadata=ca) if self._https else None
        self._token = None
        self._token_lock = threading.Lock()
        self._local = threading.local()

    # ---- the generic calls (Host.api) -----------------------------------------------

    def get(self, path, timeout=None):
        return self.request("GET", path, timeout=timeout)

    def post(self, path, body=None, timeout=None):
        return self.request("POST", path, body, timeout=timeout)

    def request(self, method, path, body=None, timeout=None):
        """(status, JSON) of an authenticated call; a 401 takes a new token once.
        Unreachable when the API cannot be reached."""
        token = self.token()
        status, data, headers = self._send(method, path, body, token, timeout)
        if status == 401:
            token = self.token(renew=token)
            status, data, headers = self._send(method, path, body, token, timeout)
        return status, data

    # ---- the agent's own calls ------------------------------------------------------

    def payload(self, known_hash, wait):
        """The payload (a long poll of `wait` seconds when known_hash is set); and the
        seconds to pause before the next poll (the API's Retry-After), else 0."""
        query = {"wait": f"{wait:g}"}
        if known_hash:
            query["hash"] = known_hash
        path = f"/v1/ua/agents/{self.agent}/payload?{urllib.parse.urlencode(query)}"
        token = self.token()
        status, data, headers = self._send("GET", path, None, token, wait + self.timeout)
        if status == 401:
            token = self.token(renew=token)
            status, data, headers = self._send("GET", path, None, token,
                                               wait + self.timeout)
        self._check(status, data)
        try:
            pause = float(headers.get("retry-after") or 0)
        except ValueError:
            pause = 1.0
        return data, pause

    def report(self, resources, removed=(), full=False):
        status, data = self.post(f"/v1/ua/agents/{self.agent}/actions/report/invoke",
                                 {"resources": resources, "removed": list(removed),
                                  "full": full})
        self._check(status, data)
        return data

    # ---- plumbing ---------------------------------------------------------------------

    def token(self, renew=None):
        """The current token; a new one when there is none or `renew` is the current."""
        with self._token_lock:
            if self._token is None or self._token == renew:
                status, data, _ = self._send("POST", TOKEN_PATH, {
                    "grant_type": "client_credentials", "client_id": self.agent,
                    "client_secret": self._secret}, None, None)
                self._check(status, data)
                self._token = data["access_token"]
            return self._token

    @staticmethod
    def _check(status, data):
        if status >= 500:
            raise Unreachable(f"the API answered {status}")
        if status >= 400:
            raise Refused(status, data)

    def _connection(self, timeout):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port,
                                                   context=self._context)
            else:
                conn = http.client.HTTPConnection(self._host, self._port)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _send(self, method, path, body, token, timeout):
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # a kept-alive connection the server closed meanwhile fails on first use: once
        # more on a fresh one before calling the API unreachable
        for attempt in (0, 1):
            conn = self._connection(timeout or self.timeout)
            try:
                conn.request(method, self._prefix + path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                status = resp.status
                hdrs = {k.lower(): v for k, v in resp.getheaders()}
                if resp.will_close:
                    self.close()
                break
            except (OSError, http.client.HTTPException) as e:
                self.close()
                if attempt == 1 or isinstance(e, (TimeoutError, ConnectionRefusedError)):
                    raise Unreachable(f"{self.endpoint}: {e}") from None
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            if status < 500:
                raise Unreachable(f"the API answered {status} with a body that is not "
                                  "JSON") from None
            parsed = None
        return status, parsed, hdrs

    def close(self):
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
