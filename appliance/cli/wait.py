"""`--wait` of every command: follow one resource until it is done, on the event stream.

Every command with --wait comes here (the service groups, compute, lb, sqldb, services,
certificates, configs, repo, elements, em): one waiter, so that each prints the same
progress, ends the same way and uses the stream the same way.

The order is what makes it miss nothing: first ask the event feed (GET /v1/events,
docs/events.md) for the revision it stands at, filtered to the one resource; then read the
resource once; then ask the feed for what came after that revision. A change made after
the command's write but before the feed was asked is in the read; one made after it is in
the feed. Each batch of events is followed by one read of the resource: an event names the
status, but some waits end on more than the status (a repository's `synced_at`, an
element's resources) and the object printed at the end is the record. So the reads follow
the changes, not a clock.

The feed is read as `appliance events --follow` reads it (events.py): `follow=false&wait=N`
asked again and again through the ordinary client (token refresh, pinned certificate,
errors), and parsed by `events.parse_stream`. Where the feed cannot be followed (404 from
an older API, 503 or 429 when its stream cap is reached, an answer that is no event stream
such as a proxy's, a dropped connection asked again once with Last-Event-ID) the wait
says so in one line on stderr and polls the resource, as it did before the feed existed.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from . import CliError
from .client import ApiError, Unreachable
from .events import EVENTS_PATH, parse_stream

POLL_SECONDS = 0.2
LONG_POLL_SECONDS = 20.0    # one ask of the feed; the API allows up to 60


def status_lines(obj):
    """The default progress: the status, and why when the record says why
    (`status_reason`: what a daemon waits for, or what failed)."""
    reason = obj.get("status_reason")
    return [("status", f"{obj.get('status')}: {reason}" if reason else f"{obj.get('status')}")]


@dataclasses.dataclass
class Watched:
    """What a --wait follows. `path`: the item (its last part is the uuid the feed is
    filtered by); `label`: its name in progress lines and messages (default the path);
    `done(obj)`: finished; `lines(obj)`: the progress lines, as (key, text), each printed
    when its text changes; `shown(obj)`: what a timeout says it is still; `never(obj)`:
    why it can never be done, or None; `until_gone`: done when the item is deleted, printing
    `gone`; `waits_for`: what it waits for, for the first line and the timeout's hint."""
    path: str
    label: str | None = None
    done: Callable = lambda obj: obj.get("status") == "ACTIVE"
    lines: Callable = status_lines
    shown: Callable = lambda obj: obj.get("status")
    never: Callable = lambda obj: None
    until_gone: bool = False
    gone: str = "deleted"
    waits_for: str | None = None


class Progress:
    """Writes a line each time the text of one of the watched keys changes, once each."""

    def __init__(self, env, label):
        self.env, self.label, self.seen = env, label, {}

    def show(self, lines, elapsed):
        for key, text in lines:
            if self.seen.get(key) != text:
                self.seen[key] = text
                self.env.stderr.write(f"{self.label}: {text} ({elapsed:.1f} s)\n")
        self.env.stderr.flush()


class StreamUnavailable(Exception):
    pass


class Feed:
    """The events of one resource, asked for after the last revision seen. `live` goes
    False, with one line on stderr, when the feed cannot be followed."""

    def __init__(self, client, env, uuid):
        self.client, self.env, self.uuid = client, env, uuid
        self.revision, self.live = None, True

    def open(self):
        """Learn the revision the feed stands at (before the resource is read)."""
        try:
            self._ask(None)
        except StreamUnavailable as why:
            self._give_up(why)

    def changed(self, seconds):
        """Whether the resource may have changed within `seconds` (True after a fall back
        to polling too: the caller reads it again)."""
        try:
            return self._ask(seconds)
        except StreamUnavailable:
            pass
        try:        # once more, after the same revision: a dropped connection costs nothing
            return self._ask(seconds, reconnect=True)
        except StreamUnavailable as why:
            self._give_up(why)
            return True

    def _ask(self, seconds, reconnect=False):
        query = [("uuid", self.uuid), ("follow", "false")]
        if self.revision is not None:
            query.append(("since", str(self.revision)))
        if seconds is not None:
            query.append(("wait", f"{seconds:.2f}"))
        # a reconnect names the last revision as an EventSource does; the API takes the
        # header over `since`, which says the same
        headers = {"Last-Event-ID": str(self.revision)} if reconnect else None
        try:
            reply = self.client.request("GET", EVENTS_PATH, query=query, headers=headers)
        except ApiError as error:
            raise StreamUnavailable(f"{error.status} {error.message}") from None
        except Unreachable as error:
            raise StreamUnavailable(error.message) from None
        if "text/event-stream" not in reply.headers.get("content-type", ""):
            raise StreamUnavailable("the answer is not an event stream")
        events, end, notes = parse_stream(reply.body.decode("utf-8", errors="replace"))
        if end is None:
            # a stream cut before its end (a proxy, the API stopping): ask again from
            # the same revision rather than trust a part of it
            raise StreamUnavailable("the event stream ended early")
        self.revision = end
        return bool(events or notes)

    def _give_up(self, why):
        self.live = False
        self.env.stderr.write(f"note: cannot follow the event stream ({why}); polling every "
                              f"{POLL_SECONDS:g} s instead\n")
        self.env.stderr.flush()


def wait_for(client, env, watched, timeout):
    """Follow `watched` until done; return its record (None once gone). ERROR, a record
    that can never be done, or `timeout` seconds: CliError."""
    label = watched.label or watched.path
    if watched.waits_for:
        goal = "gone" if watched.until_gone else "ACTIVE"
        env.stderr.write(f"waiting up to {timeout:g} s for {watched.waits_for} "
                         f"({watched.path} to be {goal})\n")
    started = env.clock()
    progress = Progress(env, label)
    feed = Feed(client, env, watched.path.rstrip("/").rsplit("/", 1)[-1])
    feed.open()
    obj = _read(client, watched)
    while True:
        elapsed = env.clock() - started
        if obj is None:
            env.stderr.write(f"{label}: {watched.gone} ({elapsed:.1f} s)\n")
            return None
        progress.show(watched.lines(obj), elapsed)
        if not watched.until_gone and watched.done(obj):
            return obj
        reason = obj.get("status_reason")
        if obj.get("status") == "ERROR":
            raise CliError(f"{label} is in ERROR: {reason or 'no reason'}")
        never = watched.never(obj)
        if never:
            raise CliError(f"not waiting: {never}")
        if elapsed > timeout:
            raise CliError(_still(label, watched, obj, timeout))
        if feed.live:
            wait = min(timeout - elapsed + 0.05, LONG_POLL_SECONDS,
                       max(1.0, client.timeout - 5.0))
            if not feed.changed(wait):
                continue
        else:
            env.sleep(POLL_SECONDS)
        obj = _read(client, watched)


def _read(client, watched):
    try:
        return client.request("GET", watched.path).payload()
    except ApiError as error:
        if watched.until_gone and error.status == 404:
            return None
        raise


def _still(label, watched, obj, timeout):
    said = f"{label} is still {watched.shown(obj)} after {timeout:g} s"
    if obj.get("status_reason"):
        # the daemon runs and says what it waits for: that is the answer
        return f"{said}: {obj['status_reason']}"
    if watched.waits_for:
        return f"{said}; is the daemon running? (--wait waits for {watched.waits_for})"
    return said
