"""Item GETs answered again from memory, on Waitress's event-loop thread (issue 32).

Why: Waitress hands every request from its event-loop thread to a worker thread (a
`Condition` notify, the worker's wake-up, both threads taking the GIL in turn, the trigger
pipe to send the answer). Measured on the bench's bare Bottle app, that hand-off is about
half of the server's CPU per request (~200 us with it, ~110 us served in the loop thread),
far more than the API's own Python (docs/server.md, "The item GET, fourth look"). A
repeated item GET by the same token can skip it, as long as the loop never waits.

What is kept: the whole answer (status line, headers, body) of an item GET route that
declares what its answer is worked out from (`Route.answer_kinds`: Resource's own item
GET), per (request target, Authorization header), once it answered 200 to a bearer token
with no query string: with the store's stamp of those kinds and of the kinds a token's
principal is read from, taken before the request read them, and the token's expiry. So an
entry holds exactly while none of those kinds changed (in this process or another) and
the token has not expired; any write to any of them voids every entry of those kinds.

When it is used: the event loop, having read a complete GET without a body, looks the
request up (`ready`). Only when an entry is there, its stamp `Store.settled` (shared
memory, no system call, no lock) and its token unexpired does the loop serve the request
itself, through the same WSGI stack as a worker would (Middleware: request id, access log;
metrics), whose innermost layer (`wrap`) answers the entry instead of calling Bottle.
Anything else goes to a worker as before, and refills the entry.
"""

import threading
import time

from . import request_context
from .waitress_mixins import mix_into

# the largest body kept (an item's, not a list's), and about how many bytes of bodies and
# keys (a token is ~1 KB) are kept in all before every entry is dropped: a bound, as the
# principal cache's, not an eviction policy (an expired token's entry stays until then)
MAX_BODY = 16 * 1024
MAX_BYTES = 16 * 1024 * 1024
# what a route sets in the environ for `wrap` to keep its answer
FILL = "appliance.answer"


class _Entry:
    __slots__ = ("stamp", "expires", "status", "headers", "body", "route", "actor")

    def __init__(self, stamp, expires, status, headers, body, route, actor):
        self.stamp, self.expires = stamp, expires
        self.status, self.headers, self.body = status, headers, body
        self.route, self.actor = route, actor


class Answers:
    def __init__(self, store):
        self.store = store
        self._entries = {}
        self._bytes = 0             # about: the request threads add without a lock
        self._replaying = threading.local()   # the entry the loop thread is answering

    @staticmethod
    def key(environ):
        """The key of a request that may be kept: a GET of a bearer token, no query, no
        body; else None."""
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("QUERY_STRING") or \
                environ.get("CONTENT_LENGTH", "0") not in ("", "0"):
            return None
        authorization, target = environ.get("HTTP_AUTHORIZATION"), environ.get("REQUEST_URI")
        if not authorization or not target:     # REQUEST_URI: Waitress's, not WSGI's
            return None
        return target, authorization

    # ---- the loop thread -------------------------------------------------------------

    def ready(self, request):
        """The entry that answers Waitress's parsed `request` now, or None. Never waits."""
        if request.error is not None or request.command != "GET" or request.query \
                or request.content_length or request.chunked:
            return None
        entry = self._entries.get((request.request_uri, request.headers.get("AUTHORIZATION")))
        if entry is None or entry.expires <= time.time() or not self.store.settled(entry.stamp):
            return None
        return entry

    def replaying(self, entry):
        """(the loop thread) The next call of the wrapped app answers `entry`."""
        self._replaying.entry = entry

    # ---- the WSGI layer ----------------------------------------------------------------

    def wrap(self, app):
        """The innermost WSGI layer (under the Middleware and the metrics): answers the
        entry the loop thread is replaying, else calls `app` and keeps an answer that
        a route marked (FILL) for its key."""
        replaying = self._replaying

        def answering(environ, start_response):
            entry = getattr(replaying, "entry", None)
            if entry is not None:
                replaying.entry = None
                environ["bottle.route"] = entry.route      # the metrics' route template
                request_context.set_actor(entry.actor)
                start_response(entry.status, list(entry.headers))
                return [entry.body]
            key = self.key(environ)
            if key is None:
                return app(environ, start_response)
            answered = []

            def capture(status, headers, exc_info=None):
                answered[:] = [status, headers]
                return start_response(status, headers, exc_info)
            body = app(environ, capture)
            fill = environ.get(FILL)
            if fill is not None and answered and answered[0] == "200 OK" \
                    and isinstance(body, list) and len(body) == 1 \
                    and isinstance(body[0], bytes) and len(body[0]) <= MAX_BODY:
                stamp, expires, actor = fill
                self._bytes += len(body[0]) + len(key[0]) + len(key[1])
                if self._bytes > MAX_BYTES:
                    self._entries.clear()
                    self._bytes = 0
                self._entries[key] = _Entry(stamp, expires, answered[0], tuple(answered[1]),
                                            body[0], environ.get("bottle.route"), actor)
            return body
        return answering


class AnsweringChannel:
    """Mixed into Waitress's channel class by `install`: a request the loop thread finds
    an entry for is served right there instead of being handed to a worker."""
    reading = False         # inside received(), on the loop thread
    ready = None            # the entry found for requests[0] by the server's add_task

    def received(self, data):
        self.reading = True
        try:
            result = super().received(data)
        finally:
            self.reading = False
        entry, self.ready = self.ready, None
        if entry is not None:
            # outside received()'s requests_lock, which service() takes; the next request
            # of a pipeline, if any, goes to a worker as before
            server = self.server
            server.answers.replaying(entry)
            server.answering = threading.get_ident()
            try:
                self.service()
            finally:
                server.answering = None
                server.answers.replaying(None)
        return result


class AnsweringServer:
    answering = None        # the loop thread's id while it serves a request itself

    def pull_trigger(self):
        # service() wakes the loop to send what it wrote; the loop itself needs no wake-up
        # (its next poll asks every channel whether it has something to send): one write
        # to the trigger pipe and one read of it less per answer
        if self.answering != threading.get_ident():
            super().pull_trigger()

    def add_task(self, channel):
        # received() calls it on the loop thread for a request just completed; service()
        # on a worker for the next pipelined one. Nothing may wait for the answer's
        # send here: nothing of an earlier answer may still be unsent.
        if getattr(channel, "reading", False) and not channel.total_outbufs_len:
            entry = self.answers.ready(channel.requests[0])
            if entry is not None:
                channel.ready = entry
                return
        super().add_task(channel)


def install(server, answers):
    """Let a Waitress server answer kept item GETs on its loop thread."""
    mix_into(server, "Answering", AnsweringChannel, AnsweringServer)
    server.answers = answers
    return server
