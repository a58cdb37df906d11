"""Test helpers: the real API app on a real Waitress server, and a raw HTTP client."""

import http.client
import json
import socket
import urllib.parse

from appliance import config
from appliance.app import create_app
from appliance.api import answers, longlived
from appliance.api.server_errors import body_limit, json_errors
from appliance.bootstrap import bootstrap
from tests.wsgiserver import LoopbackServer
from tests import ports


def free_port():
    """A port free for both UDP and TCP on 127.0.0.1 (the DNS daemon binds both)."""
    return ports.free_port(kind=socket.SOCK_DGRAM, also=[("127.0.0.1", socket.SOCK_STREAM)])


class Response:
    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers
        self.raw = raw

    @property
    def json(self):
        return json.loads(self.raw) if self.raw else None

    def header(self, name):
        return self.headers.get(name.lower())

    def __repr__(self):
        return f"<Response {self.status} {self.raw[:200]!r}>"


class Client:
    """`ssl_context` set: HTTPS (the image's nginx) instead of plain HTTP.
    `source` set: connect from that loopback address (127.0.0.2, ...), as another client
    host would (login throttling keys on the source address)."""

    def __init__(self, host, port, token=None, ssl_context=None, source=None):
        self.host, self.port, self.token = host, port, token
        self.ssl_context = ssl_context
        self.source = source

    def request(self, method, path, body=None, *, raw=None, content_type=None, headers=None,
                query=None, token=None):
        hdrs = dict(headers or {})
        tok = token if token is not None else self.token
        if tok:
            hdrs["Authorization"] = f"Bearer {tok}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if content_type is not None:
            hdrs["Content-Type"] = content_type
        if query:
            path += "?" + urllib.parse.urlencode(query, doseq=True)
        source = (self.source, 0) if self.source else None
        if self.ssl_context is not None:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=60,
                                               context=self.ssl_context,
                                               source_address=source)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=60,
                                              source_address=source)
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()},
                            resp.read())
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def with_token(self, token):
        return Client(self.host, self.port, token, self.ssl_context, self.source)


TOKEN_PATH = "/v1/iam/clients/default/actions/get_token/invoke"


class ApiServer:
    def __init__(self, state_dir, admin_password, extra=None, handover=True, **overrides):
        """handover=False: a Waitress server without the hand-over of long-lived
        connections, where their waits hold a thread (appliance/api/longlived.py)."""
        self.extra = extra
        self.handover = handover
        self.settings = config.load(environ={}, overrides={
            "state_dir": state_dir, "admin_password": admin_password,
            "api_port": free_port(), "api_threads": 4,
            # today's small caps on long-lived connections, so that the tests of what
            # happens past a cap need open only a few (tests/api/test_longlived.py lifts them)
            "agent_max_polls": 3, "events_max_streams": 3, **overrides})
        self.host = "127.0.0.1"

    def start(self):
        bootstrap(self.settings)
        self.app, self.api = create_app(self.settings)
        if self.extra is not None:
            self.extra(self.api)
        # the production server's body limit and error bodies (appliance/server.py)
        self.loop = LoopbackServer(self.app, port=self.settings["api_port"], threads=self.settings["api_threads"],
                                   max_request_body_size=body_limit(self.settings))
        json_errors(self.loop.server)
        # long polls and event streams on the event loop, as in appliance/server.py
        if self.handover:
            longlived.install(self.loop.server)
        # kept item GETs answered on the loop thread, as in appliance/server.py
        answers.install(self.loop.server, self.api.answers)
        self.loop.start()
        self.port = self.loop.port
        return self

    def stop(self):
        self.api.close()        # first: it ends long polls that would hold the threads
        self.loop.stop()
        self.api.store.close()

    @property
    def store(self):
        return self.api.store

    def client(self, token=None, source=None):
        return Client(self.host, self.port, token, source=source)

    def token_response(self, username, password, scope="", source=None):
        return self.client(source=source).post(
            TOKEN_PATH, {"grant_type": "password", "username": username,
                         "password": password, "scope": scope})

    def login(self, username, password, scope=""):
        resp = self.token_response(username, password, scope)
        assert resp.status == 200, resp
        return resp.json["access_token"]
