"""The audit trail: who changed what, when and from where (docs/audit.md).

Every state-changing request (POST, PUT, PATCH, DELETE) and every login leaves one entry:
method, path, route template, actor, source address, status, the resource's kind, uuid and
project when known, the request id, the time. Never a body nor a query string: they carry
passwords and secret values, and a trail that holds them would be a second, weaker secret
store (docs/security.md, "The audit trail holds no bodies").

Why files and a writer thread: the request thread only builds a small dict and puts it on
a queue (tests/bench/bench_audit.py measures it); one writer thread gives the entries
their uuid and time text, appends the waiting ones to the open segment in one write,
starts a new segment past audit_segment_bytes, and removes the oldest segments past the
trail's size or age (at each new segment, and once a minute). The segments are private
files of the state directory (`audit-<time>.jsonl`, mode 0600), so a backup carries them
and a restore brings them back with the rest of the state (state/backup.py).

An entry that cannot be written (a full disk) never fails the request that made it: the
writer logs how many entries were lost and why, and counts them (`Trail.lost`).
"""

import datetime
import logging
import os
import queue
import re
import threading
import time
import uuid as uuidlib

import orjson

log = logging.getLogger("appliance.audit")

STATE_CHANGING = frozenset(("POST", "PUT", "PATCH", "DELETE"))
# what routing and the handlers learn about the request (route, resource, login), for the
# middleware's entry; a key of the WSGI environ, which both see
NOTE = "appliance.audit"
SEGMENT = re.compile(r"^audit-(\d{8}T\d{6}\.\d{6}Z)\.jsonl\Z")
_STOP = object()
STOP_SECONDS = 10
# the writer removes what is past the retention at each new segment and at least this often
PRUNE_SECONDS = 60.0
# how long the writer lets entries gather after the first one of a batch
GATHER_SECONDS = 0.02


def segment_name(moment):
    return f"audit-{moment.strftime('%Y%m%dT%H%M%S.%fZ')}.jsonl"


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def format_time(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _finish(item):
    """An entry's uuid and RFC 3339 time, made by the writer (the request gave a float)."""
    if item.get("uuid") is None:
        item["uuid"] = str(uuidlib.uuid4())
    if isinstance(item.get("created_at"), float):
        item["created_at"] = format_time(datetime.datetime.fromtimestamp(
            item["created_at"], datetime.timezone.utc))
    return item


def note(environ, **facts):
    """Add what is known about this request to its coming entry (no-op outside one)."""
    if environ is not None:
        environ.setdefault(NOTE, {}).update(facts)


def note_login(environ, username, succeeded, user=None):
    """A login through the token endpoint: the username tried (never the password) and the
    outcome; on success the user becomes the entry's actor."""
    facts = {"login": {"username": username if isinstance(username, str) else None,
                       "succeeded": bool(succeeded)}}
    if succeeded and user is not None:
        facts["login_actor"] = {"type": "user", "id": user.get("uuid"),
                                "name": user.get("username"), "project_id": None}
    note(environ, **facts)


def entry(environ, path, status, request_id, actor):
    """The entry of one request, from what the middleware saw and what was noted."""
    facts = environ.get(NOTE) or {}
    actor = facts.get("login_actor") or actor
    project = facts.get("project_id")
    if project is None and actor:
        project = actor.get("project_id")
    # uuid and created_at are filled by the writer thread (`_finish`): off the request
    record = {"uuid": None, "created_at": time.time(), "request_id": request_id,
              "method": environ.get("REQUEST_METHOD"), "path": path,
              "route": facts.get("route"),
              "status": int(status) if str(status).isdigit() else None,
              "source": environ.get("REMOTE_ADDR"), "actor": actor,
              "kind": facts.get("kind"), "resource_uuid": facts.get("resource_uuid"),
              "project_id": project}
    if "login" in facts:
        record["login"] = facts["login"]
    return record


class Trail:
    """The trail of one state directory: record() from any thread, entries() to read."""

    def __init__(self, directory, max_bytes, retention_seconds, segment_bytes):
        self.directory = directory
        self.max_bytes = max_bytes
        self.retention_seconds = retention_seconds
        self.segment_bytes = segment_bytes
        self.lost = 0
        self._lost_lock = threading.Lock()
        self.queue = queue.SimpleQueue()
        self._segment = self._open_path = None
        self._fd = None
        self._size = 0
        self._pruned_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    # ---- the request thread's side -------------------------------------------------------

    def record(self, item):
        """Queue an entry; never raises (a request never fails for its entry)."""
        try:
            self.queue.put(item)
        except Exception:          # noqa: BLE001 (nothing may fail the request)
            self.count_lost(1, "it could not be queued")

    def flush(self, timeout=STOP_SECONDS):
        """Wait until every entry queued before this call is written (or lost)."""
        if not self._thread.is_alive():
            return False       # closed: nothing will be written any more
        done = threading.Event()
        self.queue.put(done)
        return done.wait(timeout)

    def close(self):
        if self._thread.is_alive():
            self.queue.put(_STOP)
            self._thread.join(STOP_SECONDS)

    def count_lost(self, count, why):
        with self._lost_lock:
            self.lost += count
        log.error("audit trail: %d entr%s lost (%s); %d lost since start", count,
                  "y" if count == 1 else "ies", why, self.lost)

    # ---- the writer thread ---------------------------------------------------------------

    def _run(self):
        stopping = False
        while not stopping:
            batch = [self.queue.get()]
            if isinstance(batch[0], dict):
                # let the entries of a busy moment gather: one wake-up and one write for
                # many requests instead of one each (a reader waits at most this long more)
                time.sleep(GATHER_SECONDS)
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            items, waiting = [], []
            for item in batch:
                if item is _STOP:
                    stopping = True
                elif isinstance(item, threading.Event):
                    waiting.append(item)
                else:
                    items.append(item)
            if items:
                self._write(items)
            for event in waiting:
                event.set()
        self._close_segment()

    def _write(self, items):
        try:
            data = b"".join(orjson.dumps(_finish(item)) + b"\n" for item in items)
            fd = self._current(len(data))
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(f"short write ({written} of {len(data)} bytes)")
            self._size += written
        except Exception as e:     # noqa: BLE001 (the writer must outlive a full disk)
            self.count_lost(len(items), str(e))
            self._close_segment()
            return
        if time.monotonic() - self._pruned_at > PRUNE_SECONDS:
            self._prune_logged()

    def _prune_logged(self):
        self._pruned_at = time.monotonic()
        try:
            self.prune()
        except OSError as e:
            log.warning("audit trail: pruning failed: %s", e)

    def _close_segment(self):
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self._segment = None

    def _current(self, adding):
        """The open segment to append to: a new one when there is none yet (or it was
        forgotten: `_segment` set to None), or the current one would pass segment_bytes."""
        if self._fd is not None and self._segment == self._open_path and (
                self._size == 0 or self._size + adding <= self.segment_bytes):
            return self._fd
        self._close_segment()
        name = segment_name(now())
        while os.path.exists(os.path.join(self.directory, name)):
            name = segment_name(now())
        path = os.path.join(self.directory, name)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        self._segment = self._open_path = path
        self._size = 0
        self._prune_logged()
        return self._fd

    def segments(self):
        """The segments' paths, oldest first."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if SEGMENT.match(n))
        except FileNotFoundError:
            return []
        return [os.path.join(self.directory, n) for n in names]

    def prune(self):
        """Remove the oldest segments while the others and a full current segment would
        pass max_bytes, and every segment whose last entry is older than
        retention_seconds. The current segment stays."""
        paths = self.segments()
        sizes = {}
        for path in paths:
            try:
                sizes[path] = os.stat(path)
            except FileNotFoundError:
                continue
        # room for the current segment to fill: the whole trail stays under max_bytes
        total = sum(st.st_size for path, st in sizes.items() if path != self._segment) + \
            self.segment_bytes
        horizon = now().timestamp() - self.retention_seconds
        for path, st in sizes.items():
            if path == self._segment:
                break
            if total <= self.max_bytes and st.st_mtime >= horizon:
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            total -= st.st_size

    # ---- reading -------------------------------------------------------------------------

    def lines(self, needles=()):
        """The raw lines of every segment, oldest first; `needles` as for entries()."""
        for path in self.segments():
            try:
                with open(path, "rb") as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                # loops, not all(any(...)): two generators a line cost more than the test
                for group in needles:
                    for needle_ in group:
                        if needle_ in line:
                            break
                    else:
                        break          # no needle of this group: skip the line
                else:
                    yield line

    def entries(self, needles=()):
        """Every entry kept, oldest first (a line that does not parse is skipped: the
        tail of a write cut short by a crash). `needles`: groups of bytes; a line that
        lacks every needle of a group is skipped unparsed (a reader's filter narrowed
        before parsing: see `needle`)."""
        for line in self.lines(needles):
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(item, dict):
                yield item


_UUID_AT, _TIME_AT = slice(9, 45), slice(61, 88)


def order_key(line):
    """(created_at, uuid) as bytes, read from a line without parsing it: the writer puts
    both first, at fixed places (orjson keeps the entry's key order); None for a line of
    another form."""
    if line.startswith(b'{"uuid":"') and line[45:61] == b'","created_at":"' and \
            line[88:89] == b'"':
        return line[_TIME_AT], line[_UUID_AT]
    return None


def needle(field, value):
    """The bytes that a line holding `field: value` contains (the writer's orjson form)."""
    return orjson.dumps({field: value})[1:-1]


def open_trail(settings):
    return Trail(settings["state_dir"], settings["audit_max_bytes"],
                 settings["audit_retention_days"] * 86400.0, settings["audit_segment_bytes"])
