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
writer logs how many entries were lost and why, and counts them (`Trail.lost`, and
`on_lost`, which the route module points at a Prometheus counter: this floor does not
import the metrics).

Why a sidecar per closed segment (`audit-<time>.index.json`): a read filtered by project,
kind, actor, method or time would otherwise read and search every segment. The sidecar
summarizes its segment (the range of its order keys, the projects, kinds, actors and
methods it holds) so that a reader skips a segment that cannot hold an answer, and reads
the segments of a page in key order until the page is sure. It is a cache, never the
truth: it names the segment's size and its own digest, and one that is missing, corrupt,
or describes another size is rebuilt from the segment (`summary`).
"""

import datetime
import hashlib
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
INDEX = re.compile(r"^audit-(\d{8}T\d{6}\.\d{6}Z)\.index\.json\Z")
INDEX_VERSION = 3
# a sidecar cuts its segment into stretches of this many lines, each with its time range:
# a reader reads only the stretches that a page needs
MARK_EVERY = 256
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
        self.on_lost = None             # (count) -> None, told of every loss
        # the trail's lock: a sidecar is written, and a segment removed, under it
        self._lock = threading.Lock()
        self._open_summary = None       # the open segment's Summary, kept as it is written
        self._summaries = {}            # path -> its Summary (checked against its size)
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
        if self.on_lost is not None:
            try:
                self.on_lost(count)
            except Exception:      # noqa: BLE001 (a metric never stops the writer)
                log.exception("audit trail: cannot count the lost entries")

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
            lines = [orjson.dumps(_finish(item)) for item in items]
            data = b"".join(line + b"\n" for line in lines)
            fd = self._current(len(data))
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(f"short write ({written} of {len(data)} bytes)")
            self._size += written
            if self._open_summary is not None:
                offset = self._size - written
                for line, item in zip(lines, items):
                    self._open_summary.add(line, item, offset)
                    offset += len(line) + 1
                self._open_summary.size = self._size
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
        closed, summary = self._segment, self._open_summary
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self._segment = None
        self._open_summary = None
        if closed is not None and summary is not None:
            # a crash before this line leaves a segment without its sidecar: the first
            # read that needs it rebuilds it (`summary`)
            self._store_index(closed, summary)

    def _store_index(self, path, summary):
        """Write a segment's sidecar atomically (a reader sees the old one or the new one),
        unless the segment is gone. Never raises: a missing sidecar is rebuilt."""
        target = index_path(path)
        temporary = f"{target}.tmp-{os.getpid()}-{threading.get_ident()}"
        with self._lock:
            try:
                if not os.path.exists(path):
                    return
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.write(fd, summary.dumps())
                finally:
                    os.close(fd)
                os.replace(temporary, target)
                self._summaries[path] = summary
            except OSError as e:
                log.warning("audit trail: cannot write the index of %s (%s); it is "
                            "rebuilt when read", os.path.basename(path), e)
                try:
                    os.unlink(temporary)
                except OSError:
                    pass

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
        self._open_summary = Summary()
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
        with self._lock:
            for path, st in sizes.items():
                if path == self._segment:
                    break
                if total <= self.max_bytes and st.st_mtime >= horizon:
                    continue
                for gone in (path, index_path(path)):
                    try:
                        os.unlink(gone)
                    except FileNotFoundError:
                        pass
                self._summaries.pop(path, None)
                total -= st.st_size
            self._remove_stray_indexes()

    def _remove_stray_indexes(self):
        """Sidecars whose segment is gone (removed by another process, or by hand), and
        temporary sidecars a crash left (an hour old: another process may be writing one)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        present = set(names)
        for name in names:
            if not name.startswith("audit-"):
                continue
            path = os.path.join(self.directory, name)
            match = INDEX.match(name)
            try:
                if match and f"audit-{match.group(1)}.jsonl" not in present:
                    os.unlink(path)
                elif ".index.json.tmp-" in name and \
                        os.stat(path).st_mtime < time.time() - 3600:
                    os.unlink(path)
            except OSError as e:       # gone meanwhile, or not a file: left as it is
                log.debug("audit trail: %s stays: %s", name, e)

    def usage(self):
        """(bytes, segments) of the kept segments (their sidecars not counted)."""
        total = count = 0
        for path in self.segments():
            try:
                total += os.stat(path).st_size
            except FileNotFoundError:
                continue
            count += 1
        return total, count

    # ---- reading -------------------------------------------------------------------------

    def summary(self, path):
        """The Summary of a segment, from its sidecar when that is sound and describes the
        segment as it is, else rebuilt from the segment (and its sidecar rewritten); None
        for the segment being written now, or one that is gone (read it whole)."""
        if path == self._segment:
            return None
        try:
            size = os.stat(path).st_size
        except OSError:
            return None
        cached = self._summaries.get(path)
        if cached is not None and cached.size == size:
            return cached
        try:
            with open(index_path(path), "rb") as f:
                found = Summary.loads(f.read())
        except OSError:
            found = None
        if found is None or found.size != size:
            try:
                with open(path, "rb") as f:
                    found = Summary.of(f.read())
            except OSError:
                return None
            self._store_index(path, found)
        self._summaries[path] = found
        return found

    def lines(self, needles=()):
        """The raw lines of every segment, oldest first; `needles` as for entries()."""
        for path in self.segments():
            yield from self.segment_lines(path, needles)

    def segment_lines(self, path, needles=(), start=0, end=None):
        """The raw lines of one segment, or of its bytes from `start` (a line's start) to
        `end` (none when it is gone); `needles` as for entries()."""
        try:
            with open(path, "rb") as f:
                if start:
                    f.seek(start)
                lines = (f.read() if end is None else f.read(end - start)).splitlines()
        except FileNotFoundError:
            return
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


def index_path(segment):
    """The sidecar of a segment's path."""
    return segment[:-len(".jsonl")] + ".index.json"


def line_key(line):
    """(created_at, uuid) as bytes of a line, and its entry when it had to be parsed for
    them; (None, None) for a line that has no place in the order (the readers skip it)."""
    key = order_key(line)
    if key is not None:
        return key, None
    try:
        item = orjson.loads(line)
        return (str(item["created_at"]).encode(), str(item["uuid"]).encode()), item
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None, None


class Summary:
    """What one segment holds, for skipping it: the range of its lines' order keys' times
    (bytes, as `line_key` gives them) and the values its entries carry for each filter.
    The sets are the values a reader's filter compares (`appliance/audit.py`): projects
    (the entry's and its actor's: a line holding either passes the project needle), kinds,
    actors (id, name, and a login's username) and methods. `marks`: [offset, lowest time,
    highest time] of each stretch of MARK_EVERY lines, from the offset of its first line
    (`stretches`): the lines need not be in order (entries are timed when answered, and
    concurrent requests reach the writer in any order)."""

    FIELDS = ("projects", "kinds", "actors", "methods")

    def __init__(self):
        self.size = 0
        self.count = 0
        self.first = self.last = None
        self.projects, self.kinds, self.actors, self.methods = set(), set(), set(), set()
        self.marks = []

    def stretches(self):
        """(start, end, lowest time, highest time) of the stretches of the segment,
        which a reader may read apart."""
        return [(0 if i == 0 else offset,
                 self.marks[i + 1][0] if i + 1 < len(self.marks) else self.size, low, high)
                for i, (offset, low, high) in enumerate(self.marks)]

    def add(self, line, item=None, offset=0):
        key, parsed = line_key(line)
        if key is None:
            return
        if self.count % MARK_EVERY == 0:
            self.marks.append([offset, key[0], key[0]])
        else:
            mark = self.marks[-1]
            if key[0] < mark[1]:
                mark[1] = key[0]
            if key[0] > mark[2]:
                mark[2] = key[0]
        self.count += 1
        if self.first is None or key[0] < self.first:
            self.first = key[0]
        if self.last is None or key[0] > self.last:
            self.last = key[0]
        if item is None:
            item = parsed
        if item is None:
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError:
                return
        if not isinstance(item, dict):
            return
        actor = item.get("actor")
        actor = actor if isinstance(actor, dict) else {}
        login = item.get("login")
        login = login if isinstance(login, dict) else {}
        for values, candidates in (
                (self.projects, (item.get("project_id"), actor.get("project_id"))),
                (self.kinds, (item.get("kind"),)),
                (self.actors, (actor.get("id"), actor.get("name"), login.get("username"))),
                (self.methods, (item.get("method"),))):
            for value in candidates:
                if isinstance(value, str):
                    values.add(value)

    def body(self):
        return {"version": INDEX_VERSION, "size": self.size, "count": self.count,
                "first": None if self.first is None else self.first.decode("latin-1"),
                "last": None if self.last is None else self.last.decode("latin-1"),
                "marks": [[o, low.decode("latin-1"), high.decode("latin-1")]
                          for o, low, high in self.marks],
                **{name: sorted(getattr(self, name)) for name in self.FIELDS}}

    def dumps(self):
        body = self.body()
        return orjson.dumps({**body, "digest": _digest(body)})

    @classmethod
    def loads(cls, data):
        """The summary a sidecar holds, or None when it is not one (any doubt)."""
        try:
            found = orjson.loads(data)
            digest = found.pop("digest")
            if found.get("version") != INDEX_VERSION or digest != _digest(found):
                return None
            summary = cls()
            summary.size, summary.count = int(found["size"]), int(found["count"])
            for end in ("first", "last"):
                value = found[end]
                setattr(summary, end, None if value is None else value.encode("latin-1"))
            for name in cls.FIELDS:
                setattr(summary, name, set(found[name]))
            summary.marks = [[int(o), low.encode("latin-1"), high.encode("latin-1")]
                             for o, low, high in found["marks"]]
            if len(summary.marks) != -(-summary.count // MARK_EVERY) or any(
                    not 0 <= o <= summary.size for o, _, _ in summary.marks):
                return None     # another MARK_EVERY, or not a sidecar of this segment
            return summary
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError,
                UnicodeError):
            return None

    @classmethod
    def of(cls, data):
        summary = cls()
        summary.size = len(data)
        offset = 0
        for line in data.splitlines(keepends=True):
            summary.add(line.rstrip(b"\r\n"), offset=offset)
            offset += len(line)
        return summary


def _digest(body):
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def open_trail(settings):
    return Trail(settings["state_dir"], settings["audit_max_bytes"],
                 settings["audit_retention_days"] * 86400.0, settings["audit_segment_bytes"])
