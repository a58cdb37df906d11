"""GET /v1/events: the store's change feed (state/feed.py) as Server-Sent Events, each
event shown only to a caller that may read its resource. See docs/events.md.

Why a stream of the feed and not of the change watch: the feed numbers every committed
write across kinds and processes and keeps a window of them, so an event's `id:` is a
revision a client can reconnect from (Last-Event-ID) and miss nothing, even across an
API restart. Who may see an event is decided by the resource's own read rule (its
permission, its `admit`, its visible projects: appliance/api/resource.py), never by a
rule of this module.

A stream waits on the API's event loop (longlived.py): on the API's own Waitress server
it holds no thread, and `events_max_streams` (1000 by default) caps the streams; one more
gets 503 with Retry-After. On a server without the hand-over each stream holds a thread and
the cap is also `api_threads - 1`. One watcher thread per process reads the feed's counter
(a shared mapping, no syscall) and wakes every waiting stream when it moves: no stream
looks at the feed on its own clock.
"""

import asyncio
import contextlib
import datetime
import threading
import time

import bottle
import orjson

from state import format_time
from state.feed import FeedGone

from .errors import ApiError, BadRequest, Forbidden
from .longlived import Parked, can_hand_over

WATCH_SECONDS = 0.02        # how often the one watcher looks at the feed's counter
RECENT = 100                # entries a stream that does not follow starts back from
MAX_WAIT = 60.0             # longest `wait` of a stream that does not follow
LOOP_STREAMS = 1000         # events_max_streams when unset, on the event loop
EVENT_STREAM = "event_stream"   # its kind among the long-lived connections (docs/metrics.md)

TYPES = {"create": "created", "update": "updated", "delete": "deleted"}


class TooManyStreams(ApiError):
    status, type = 503, "ServiceUnavailable"

    def __init__(self, limit):
        super().__init__(f"{limit} event streams are open, the most this API serves at "
                         "once (events_max_streams); retry after the seconds in "
                         "Retry-After", headers={"Retry-After": "5"})


def stream_limit(settings, on_loop=True):
    """events_max_streams, else 1000 on the loop; a stream that holds a thread (no
    hand-over) always leaves one for ordinary requests."""
    configured = settings.get("events_max_streams")
    if on_loop:
        return LOOP_STREAMS if configured is None else int(configured)
    threads = int(settings.get("api_threads", 32)) - 1
    return max(0, min(4 if configured is None else int(configured), threads))


class EventHub:
    """The streams of one API process: how many are open, what wakes them, when to stop."""

    def __init__(self, api):
        self.api = api
        self.limit = stream_limit(api.settings)
        self.thread_limit = stream_limit(api.settings, on_loop=False)
        self.heartbeat = float(api.settings.get("events_heartbeat_seconds", 15.0))
        self.open = 0
        self.on_threads = 0
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._moved = None              # asyncio.Event of the waiting streams (loop thread)
        self._watcher = None
        # (kind) -> context manager around an open stream: the composition root sets
        # metrics.long_lived here (this floor does not import the metrics)
        self.gauge = None

    def counted(self):
        return self.gauge(EVENT_STREAM) if self.gauge else contextlib.nullcontext()

    def enter(self, on_loop):
        with self._lock:
            if self.open >= self.limit:
                raise TooManyStreams(self.limit)
            if not on_loop and self.on_threads >= self.thread_limit:
                raise TooManyStreams(self.thread_limit)
            self.open += 1
            self.on_threads += not on_loop
        self._start_watch()

    def leave(self, on_loop):
        with self._lock:
            self.open -= 1
            self.on_threads -= not on_loop

    def stop(self):
        self.stopping.set()
        self.api.eventloop.call_soon(self._wake)

    # ---- wake-ups: one watcher of the feed's counter for every stream ---------------

    def _start_watch(self):
        with self._lock:
            if self._watcher is not None:
                return
            self._watcher = threading.Thread(target=self._watch, daemon=True,
                                             name="events-feed-watch")
        self._watcher.start()

    def _watch(self):
        feed = self.api.store.feed
        seen = feed.last()
        while not self.stopping.wait(WATCH_SECONDS):
            try:
                last = feed.last()
            except (OSError, ValueError):          # the store closed under a stopping API
                return
            if last != seen:
                seen = last
                self.api.eventloop.call_soon(self._wake)

    def _wake(self):
        moved, self._moved = self._moved, None
        if moved is not None:
            moved.set()

    async def moved(self, seconds, gone):
        """Until the feed moves, the stream's client leaves, the API stops, or `seconds`."""
        if self._moved is None:
            self._moved = asyncio.Event()
        waits = [asyncio.ensure_future(self._moved.wait()),
                 asyncio.ensure_future(gone.wait())]
        try:
            await asyncio.wait(waits, timeout=max(0.0, seconds),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


# ---- who may see an event -----------------------------------------------------------------

def resources_by_kind(api):
    by_kind = {}
    for resource in api.resources.values():
        by_kind.setdefault(resource.kind, []).append(resource)
    return by_kind


def readable(resource, call, project_id):
    """Whether the caller may read a record of `resource` in `project_id`: the same three
    checks as its GET (the read permission, the resource's admit, its visible projects)."""
    if call.principal is not None and not call.principal.allows(resource.permission("read")):
        return False
    try:
        resource.admit(call)
    except ApiError:
        return False
    visible = resource.visible_projects(call)
    return visible is None or project_id in visible


class Visibility:
    """Per-stream cache of readable(): the caller does not change during a stream."""

    def __init__(self, by_kind, call):
        self.by_kind = by_kind
        self.call = call
        self._known = {}

    def resource(self, kind, project_id):
        key = (kind, project_id)
        if key not in self._known:
            self._known[key] = next((r for r in self.by_kind.get(kind, ())
                                     if readable(r, self.call, project_id)), None)
        return self._known[key]


# ---- the event of a feed entry --------------------------------------------------------------

def event_of(entry, resource):
    op = entry["op"]
    kind = TYPES[op]
    action = entry.get("action")
    if op == "update":
        if action and action.get("uuid") == entry["uuid"]:
            kind = "action_invoked"
        elif entry.get("old_status") != entry.get("status"):
            kind = "status_changed"
    return {"revision": entry["seq"], "type": kind, "kind": entry["kind"],
            "resource": resource.name,
            "path": (f"{resource.path}/{entry['uuid']}" if not resource.parent else None),
            "uuid": entry["uuid"], "name": entry.get("name"),
            "project_id": entry.get("project_id"),
            "record_revision": entry.get("revision"),
            "status": entry.get("status"), "old_status": entry.get("old_status"),
            "status_reason": entry.get("status_reason"),
            "action": action.get("name") if action and kind == "action_invoked" else None,
            "actor": entry.get("actor"), "request_id": entry.get("request_id"),
            "timestamp": entry.get("at")}


def sse(event_id, name, data):
    return (f"id: {event_id}\nevent: {name}\n".encode() + b"data: " + orjson.dumps(data)
            + b"\n\n")


# ---- the route ------------------------------------------------------------------------------

def _since(feed, call):
    """The revision to start after: Last-Event-ID, else `since` (a revision or a time),
    else now (or the recent entries when not following)."""
    header = call.request.get_header("Last-Event-ID") if call.request else None
    raw = header if header not in (None, "") else call.query.get("since")
    if raw in (None, ""):
        return None
    raw = raw.strip()
    if raw.isdigit():
        return int(raw)
    try:
        moment = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"since: {raw!r} is neither a revision (a whole number) nor a "
                         "time (RFC 3339, like 2026-11-26T08:00:00Z)") from None
    if moment.tzinfo is None:
        raise BadRequest("since: give the time's zone (Z for UTC)")
    return feed.after_time(format_time(moment))


def _flag(call, name, default):
    value = call.query.get(name)
    if value in (None, ""):
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise BadRequest(f"{name}: true or false, not {value!r}")


def register(api):
    hub = EventHub(api)
    api.events = hub
    api.closers.append(hub.stop)

    def events(call):
        by_kind = resources_by_kind(api)
        kinds = set(call.query.getall("kind"))
        unknown = sorted(kinds - set(by_kind))
        if unknown:
            raise BadRequest(f"kind: no resource kind {', '.join(unknown)}; the kinds are "
                             f"{', '.join(sorted(by_kind))}")
        projects = {p.lower() for p in call.query.getall("project_id")}
        scoped = call.principal.project_id if call.principal is not None else None
        if scoped is not None and projects - {scoped}:
            raise Forbidden(f"filtering by project {sorted(projects - {scoped})[0]} is not "
                            "allowed for this token")
        one = (call.query.get("uuid") or "").lower() or None
        # an EventSource (Accept: text/event-stream) follows; any other client gets what
        # is there unless it asks follow=true: a generic client (a fuzzer, curl, a
        # script) that reads a body to its end is not left hanging
        accept = call.request.get_header("Accept", "") if call.request else ""
        follow = _flag(call, "follow", "text/event-stream" in accept)
        wait = call.query.get("wait") or "0"
        try:
            wait = float(wait)
        except ValueError:
            wait = -1
        if not 0 <= wait <= MAX_WAIT:
            raise BadRequest(f"wait: seconds from 0 to {MAX_WAIT}, not {call.query['wait']!r}")
        feed = api.store.feed
        after = _since(feed, call)
        if after is None:
            last = feed.last()
            after = last if follow else max(feed.oldest() - 1, last - RECENT)
        on_loop = can_hand_over()
        hub.enter(on_loop)
        # the caller's request outlives this thread: its own copy, for re-authentication
        request = bottle.BaseRequest(dict(call.request.environ)) if call.request else None
        call.request = request
        visibility = Visibility(by_kind, call)

        async def serve(exchange):
            try:
                with hub.counted():
                    await _serve(exchange)
            finally:
                hub.leave(on_loop)

        async def _serve(exchange):
            await exchange.head(200, {"Cache-Control": "no-cache",
                                      "X-Accel-Buffering": "no"}, "text/event-stream")
            await _stream(api, hub, call.principal, request, exchange, visibility,
                          feed, after, kinds, projects, one, follow, wait)
        return Parked(serve)

    api.route("GET", "/v1/events", events, permission="authenticated",
              summary="Lifecycle events as Server-Sent Events (docs/events.md)",
              tag="events",
              # the query (kind, project_id, uuid, since, follow) is no list's filter:
              # docs/events.md
              error_schemas={"503": {
                  "description": "ServiceUnavailable: events_max_streams streams are "
                                 "open; retry after Retry-After",
                  "$ref": "#/components/schemas/Error"}})


async def _stream(api, hub, principal, request, exchange, visibility, feed, after, kinds,
                  projects, one, follow, wait):
    """follow=false: what is there, then the end; with `wait`, the end comes only after
    the first event sent or `wait` seconds (a long poll: the CLI's --follow)."""
    until = time.monotonic() + wait
    sent = False
    write = exchange.write
    await write(b": events of this appliance; id is the feed revision\nretry: 1000\n\n")
    try:
        cursor = feed.cursor(after)
    except FeedGone as gone:
        await write(sse(gone.last, "resync", {"revision": gone.last, "asked": after,
                                              "message": str(gone)}))
        cursor = feed.cursor(gone.last)
    beat = time.monotonic() + hub.heartbeat
    while not hub.stopping.is_set() and not exchange.gone.is_set():
        try:
            entries = cursor.read(500)
        except FeedGone as gone:
            await write(sse(gone.last, "resync", {"revision": gone.last,
                                                  "asked": cursor.after,
                                                  "message": str(gone)}))
            cursor = feed.cursor(gone.last)
            continue
        for entry in entries:
            if kinds and entry["kind"] not in kinds:
                continue
            if projects and entry.get("project_id") not in projects:
                continue
            if one is not None and entry["uuid"] != one:
                continue
            resource = visibility.resource(entry["kind"], entry.get("project_id"))
            if resource is not None:
                sent = True
                await write(sse(entry["seq"], "lifecycle", event_of(entry, resource)))
        if entries:
            continue
        if not follow and (sent or time.monotonic() >= until):
            # where the reader is, even when nothing it may see came: it asks from here
            await write(f": end {cursor.after}\n\n".encode())
            return
        now = time.monotonic()
        if now >= beat:
            # a token revoked or expired during the stream ends it
            if principal is not None and api.authenticate is not None:
                try:
                    api.authenticate(request)
                except ApiError as e:
                    await write(sse(cursor.after, "end", {"message": e.message}))
                    return
            await write(f": heartbeat {cursor.after}\n\n".encode())
            beat = now + hub.heartbeat
        next_stop = beat if follow else min(beat, until)
        await hub.moved(next_stop - time.monotonic(), exchange.gone)
    if not exchange.gone.is_set():
        await write(sse(cursor.after, "end", {"message": "the server is stopping; "
                                                         "reconnect with Last-Event-ID"}))
