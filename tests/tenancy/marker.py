"""A marker HTTP server on loopback: it counts every request, so a test can show that a
refused fetch never reached it (hit count 0)."""

import time
import warnings

from tests.wsgiserver import LoopbackServer


class Marker:
    """Waitress on `host` (a 127.x address); `files` {path: bytes} are served, `/slow`
    trickles bytes, `/redirect?to=URL` answers 302 to URL. `hits` lists the paths asked
    for, with the Host header each came with."""

    def __init__(self, host="127.0.0.1"):
        self.files, self.hits = {}, []
        with warnings.catch_warnings():
            # send_bytes=1: each trickled byte leaves at once (deprecated, still honoured)
            warnings.simplefilter("ignore", DeprecationWarning)
            self.server = LoopbackServer(self.app, host=host, send_bytes=1)
        self.host, self.port = host, self.server.port

    def app(self, environ, start_response):
        path = environ["PATH_INFO"]
        self.hits.append((path, environ.get("HTTP_HOST")))
        if path == "/redirect":
            to = environ.get("QUERY_STRING", "").removeprefix("to=")
            start_response("302 Found", [("Location", to)])
            return [b""]
        if path == "/slow":
            start_response("200 OK", [("Content-Type", "application/octet-stream")])
            return self._trickle()
        data = self.files.get(path)
        if data is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"no such file"]
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(len(data)))])
        return [data]

    @staticmethod
    def _trickle():
        for _ in range(200):
            time.sleep(0.05)
            yield b"x"

    def url(self, path, host=None):
        return f"http://{host or self.host}:{self.port}{path}"

    def start(self):
        self.server.start()
        return self

    def stop(self):
        self.server.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
