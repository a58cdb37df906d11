"""GET /v1/events: the store's change feed (state/feed.py) as Server-Sent Events, each
event shown only to a caller that may read its resource. See docs/events.md.

Why a stream of the feed and not of the change watch: the feed numbers every committed
write across kinds and processes and keeps a window of them, so an event's `id:` is a
revision a client can reconnect from (Last-Event-ID) and miss nothing, even across an
API restart. Who may see an event is decided by the resource's own read rule (its
permission, its `admit`, its visible projects: appliance/api/resource.py), never by a
rule of this module.

Each open stream holds one Waitress thread until the event-loop serving of issue 29
comes: `events_max_streams` caps them, and one more gets 503 with Retry-After.
"""

import datetime
import threading
import time

import orjson

from state import format_time
from state.feed import FeedGone

from .errors import ApiError, BadRequest, Forbidden
from .routing import Stream

POLL_SECONDS = 0.2          # how often a stream looks at the feed's counter (no syscall)
RECENT = 100                # entries a stream that does not follow starts back from
MAX_WAIT = 60.0             # longest `wait` of a stream that does not follow

TYPES = {"create": "created", "update": "updated", "delete": "deleted"}


class TooManyStreams(ApiError):
    status, type = 503, "ServiceUnavailable"

    def __init__(self, limit):
        super().__init__(f"{limit} event streams are open, the most this API serves at "
                         "once (events_max_streams); retry after the seconds in "
                         "Retry-After", headers={"Retry-After": "5"})


def stream_limit(settings):
    """events_max_streams, else 4, always leaving a thread for ordinary requests."""
    if settings.get("events_max_streams") is not None:
        return int(settings["events_max_streams"])
    return max(0, min(4, int(settings.get("api_threads", 32)) - 1))


class EventHub:
    """The streams of one API process: how many are open, and when to stop them."""

    def __init__(self, api):
        self.api = api
        self.limit = stream_limit(api.settings)
        self.heartbeat = float(api.settings.get("events_heartbeat_seconds", 15.0))
        self.open = 0
        self._lock = threading.Lock()
        self.stopping = threading.Event()

    def enter(self):
        with self._lock:
            if self.open >= self.limit:
                raise TooManyStreams(self.limit)
            self.open += 1

    def leave(self):
        with self._lock:
            self.open -= 1

    def stop(self):
        self.stopping.set()


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
        hub.enter()
        try:
            chunks = _stream(api, hub, call, Visibility(by_kind, call), feed, after,
                             kinds, projects, one, follow, wait)
        except BaseException:
            hub.leave()
            raise
        return Stream(chunks, "text/event-stream",
                      {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    api.route("GET", "/v1/events", events, permission="authenticated",
              summary="Lifecycle events as Server-Sent Events (docs/events.md)",
              tag="events",
              # the query (kind, project_id, uuid, since, follow) is no list's filter:
              # docs/events.md
              error_schemas={"503": {
                  "description": "ServiceUnavailable: events_max_streams streams are "
                                 "open; retry after Retry-After",
                  "$ref": "#/components/schemas/Error"}})


def _stream(api, hub, call, visibility, feed, after, kinds, projects, one, follow, wait):
    """follow=false: what is there, then the end; with `wait`, the end comes only after
    the first event sent or `wait` seconds (a long poll: the CLI's --follow)."""
    until = time.monotonic() + wait
    sent = False
    try:
        yield b": events of this appliance; id is the feed revision\nretry: 1000\n\n"
        try:
            cursor = feed.cursor(after)
        except FeedGone as gone:
            yield sse(gone.last, "resync", {"revision": gone.last, "asked": after,
                                            "message": str(gone)})
            cursor = feed.cursor(gone.last)
        beat = time.monotonic() + hub.heartbeat
        while not hub.stopping.is_set():
            try:
                entries = cursor.read(500)
            except FeedGone as gone:
                yield sse(gone.last, "resync", {"revision": gone.last,
                                                "asked": cursor.after,
                                                "message": str(gone)})
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
                    yield sse(entry["seq"], "lifecycle", event_of(entry, resource))
            if entries:
                continue
            if not follow and (sent or time.monotonic() >= until):
                # where the reader is, even when nothing it may see came: it asks from here
                yield f": end {cursor.after}\n\n".encode()
                return
            now = time.monotonic()
            if now >= beat:
                # a token revoked or expired during the stream ends it
                if call.principal is not None and api.authenticate is not None:
                    try:
                        api.authenticate(call.request)
                    except ApiError as e:
                        yield sse(cursor.after, "end", {"message": e.message})
                        return
                yield f": heartbeat {cursor.after}\n\n".encode()
                beat = now + hub.heartbeat
            hub.stopping.wait(POLL_SECONDS)
        yield sse(cursor.after, "end", {"message": "the server is stopping; reconnect "
                                                   "with Last-Event-ID"})
    finally:
        hub.leave()
