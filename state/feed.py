"""The change feed: every committed write of every kind, numbered across kinds and
processes, kept for a bounded window. See docs/store.md ("Change feed") and docs/events.md.

Why here and not beside the kinds: readers (event streams, the audit trail, the console)
ask "everything after revision R" and must miss nothing, while the change watch only says
"kind K moved". So a write of any kind takes one more lock, the feed's, *inside* its kind's
lock (never the other way round), and under it:

1. notes in the feed's lock file which journal line it is about to write (the pending
   record: kind, journal inode, offset, first sequence number, count);
2. writes its journal line, which carries the feed entries themselves (`"feed": [...]`),
   and fdatasyncs it: the commit;
3. appends the entries to the current feed segment (no fsync of its own) and then moves
   the counter (the last sequence number) and the segment's committed size.

A writer killed between 1 and 3 leaves the counter behind its pending record: the next
holder of the feed lock cuts the segment back to its committed size and, if the journal
line is complete (the write is committed: every reader of the kind sees it), appends the
entries from it; if the line is torn or absent (the write was never acknowledged, and the
kind's next writer cuts it off), nothing. So a committed write always gets its entries, an
uncommitted one never does, and sequence numbers have no gaps. A compaction of a kind takes
the feed lock first (and fsyncs the segment), so the journal line a pending record points
at is still there when it is resolved. A power loss can take the newest feed entries (the
segment is not fsynced on every write) while their journal lines stay: the first writer
after a reboot makes them again from the journals (`_after_reboot`).

Files: `<state>/.feed/feed.lock` (the lock, and in its first bytes the counter, the
current segment and the pending record) and `<state>/.feed/<first seq>.log`, one JSON line
per entry. The directory is hidden: it is no kind and no private file, so backups do not
carry it (a restored state starts a new window: `Feed.reset`).
"""

import fcntl
import mmap
import os
import struct
import sys
import threading
import time

import orjson

from .errors import StoreError

FEED_DIR = ".feed"
JOURNAL_SUFFIX = ".journal"     # state/collection.py's, which imports this module
LOCK_NAME = "feed.lock"
BOOT_FILE = "boot"              # the boot id of the last reboot check (_after_reboot)
BOOT_ID = "/proc/sys/kernel/random/boot_id"
SEGMENT_SUFFIX = ".log"
DEFAULT_KEEP_ENTRIES = 100_000
DEFAULT_KEEP_SECONDS = 7 * 86400.0

_U64 = struct.Struct("<Q")
_HEAD = struct.Struct("<QQQ")           # last seq, current segment's first seq, its size
_PENDING = struct.Struct("<QQQQQ")      # first seq, count, journal inode, offset, name length
_PENDING_AT = _HEAD.size
_LOCK_SIZE = 4096


class FeedGone(StoreError):
    """The revision asked for is outside the feed's window (older than its oldest entry,
    or newer than its newest): the reader must do a full resync."""

    def __init__(self, after, oldest, last):
        super().__init__(f"revision {after} is outside the change feed's window "
                         f"({oldest - 1}..{last}): read the resources again, then follow "
                         f"from revision {last}")
        self.after = after
        self.oldest = oldest
        self.last = last


# ---- who wrote: the origin of a write --------------------------------------------------

_origin_source = None


def set_origin_source(source):
    """`source() -> (request_id, actor or None, action or None)`: the API installs it (request_context),
    so that the store, which must not import the API, names the request behind a write.
    Returns the source it replaces (a test puts it back)."""
    global _origin_source
    previous, _origin_source = _origin_source, source
    return previous


def _process_name():
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name.rsplit(".", 1)[-1]
    return os.path.basename(sys.argv[0] or "") or None


_process_actor = {"type": "platform", "id": None, "name": None, "project_id": None}


def set_process_actor(name):
    """The actor of the writes of this process outside any request (a daemon's name)."""
    _process_actor["name"] = name


def origin():
    """(request id, actor, action) of the write the current thread is making; outside a
    request the actor is this process (the platform, under its daemon's name)."""
    request_id, actor, action = (None, None, None)
    if _origin_source is not None:
        request_id, actor, action = _origin_source()
    if actor is None:
        actor = dict(_process_actor)
        if actor["name"] is None:
            actor["name"] = _process_name()
    return request_id, actor, action


# ---- the entries of one journal line ----------------------------------------------------

def _project(record):
    project = record.get("project_id")
    if project is None and isinstance(record.get("project"), str):
        project = record["project"].rsplit("/", 1)[-1] or None
    return project


def describe(kind, entry, table, at, who):
    """(entries without seq, note) for a journal entry about to be applied to `table`
    (uuid -> the records before it). The note is what the journal line carries so that
    the entries can be made again from the line alone (`expand`): what the line itself
    does not hold (the time, the origin, what a delete or an update replaced)."""
    request_id, actor, action = who
    actor = {k: v for k, v in actor.items() if v is not None}
    replaced = []
    for uuid in entry.get("del") or ():
        old = table.get(uuid)
        replaced.append(None if old is None else
                        [old.get("revision"), _name(old), _project(old), old.get("status")])
    for record in entry.get("put") or ():
        old = table.get(record["uuid"])
        replaced.append(None if old is None else [old.get("status")])
    note = [at, request_id, actor, action, replaced]
    return expand(kind, entry, note), note


def expand(kind, entry, note, first_seq=None):
    """The feed entries of a journal entry and its note (see describe)."""
    at, request_id, actor, action, replaced = note
    actor = {"type": None, "id": None, "name": None, "project_id": None, **actor}
    common = {"at": at, "request_id": request_id, "actor": actor, "action": action}
    made = []
    olds = iter(replaced)
    for uuid in entry.get("del") or ():
        old = next(olds)
        if old is not None:
            revision, name, project, status = old
            made.append({"kind": kind, "uuid": uuid, "op": "delete", "revision": revision,
                         "name": name, "project_id": project, "old_status": status,
                         "status": None, "status_reason": None, **common})
    for record in entry.get("put") or ():
        old = next(olds)
        made.append({"kind": kind, "uuid": record["uuid"],
                     "op": "create" if old is None else "update",
                     "revision": record.get("revision"), "name": _name(record),
                     "project_id": _project(record),
                     "old_status": old[0] if old is not None else None,
                     "status": record.get("status"),
                     "status_reason": record.get("status_reason"), **common})
    if first_seq is not None:
        for i, item in enumerate(made):
            item["seq"] = first_seq + i
    return made


def _name(record):
    name = record.get("name")
    if not isinstance(name, str):
        name = record.get("username")       # a user's name
    return name if isinstance(name, str) else None


# ---- the feed ----------------------------------------------------------------------------

class Feed:
    def __init__(self, directory):
        self.directory = os.path.join(directory, FEED_DIR)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self.keep_entries = DEFAULT_KEEP_ENTRIES
        self.keep_seconds = DEFAULT_KEEP_SECONDS
        self._fd = os.open(os.path.join(self.directory, LOCK_NAME), os.O_RDWR | os.O_CREAT,
                           0o600)
        self._threads = threading.RLock()
        self._depth = 0
        self._view = None
        self._segment = None            # (first seq, fd) of the segment this process appends to
        self._boot_checked = False

    def configure(self, keep_entries=None, keep_seconds=None):
        if keep_entries is not None:
            self.keep_entries = max(1, int(keep_entries))
        if keep_seconds is not None:
            self.keep_seconds = float(keep_seconds)

    def close(self):
        with self._threads:
            if self._segment is not None:
                os.close(self._segment[1])
                self._segment = None
            view, self._view = self._view, None
            if view is not None:
                try:
                    view.close()
                except BufferError:
                    pass
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # ---- the counter ------------------------------------------------------------------

    def last(self):
        """The newest committed sequence number (0 before the first write): one read of
        a shared mapping, no syscall once mapped."""
        view = self._view
        if view is None:
            if os.fstat(self._fd).st_size < _LOCK_SIZE:
                return _U64.unpack(os.pread(self._fd, 8, 0).ljust(8, b"\0"))[0]
            view = self._view = mmap.mmap(self._fd, _HEAD.size, prot=mmap.PROT_READ)
        return _U64.unpack_from(view, 0)[0]

    # ---- writing (called by Collection._write under the kind's lock) --------------------

    def __enter__(self):
        self._threads.acquire()
        if self._depth == 0:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                self._recover()
            except BaseException:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                self._threads.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def _head(self):
        raw = os.pread(self._fd, _LOCK_SIZE, 0)
        if len(raw) < _LOCK_SIZE:
            os.ftruncate(self._fd, _LOCK_SIZE)
            raw = os.pread(self._fd, _LOCK_SIZE, 0)
        return raw

    def next_seq(self):
        """(feed lock held) The sequence number the next entry gets."""
        return _HEAD.unpack_from(self._head(), 0)[0] + 1

    def mark_pending(self, name, ino, offset, first, count):
        """(feed lock held) Step 1: the journal line about to be written."""
        raw = name.encode()
        os.pwrite(self._fd, _PENDING.pack(first, count, ino, offset, len(raw)) + raw,
                  _PENDING_AT)

    def append(self, entries):
        """(feed lock held) Step 3: entries (with their seq) after their journal line is
        durable."""
        last, first, size = _HEAD.unpack_from(self._head(), 0)
        segment_first, fd = self._current_segment(first, entries[0]["seq"])
        if segment_first != first:
            size = 0
        data = b"".join(orjson.dumps(e) + b"\n" for e in entries)
        _pwrite_all(fd, data, size)
        os.pwrite(self._fd, _HEAD.pack(entries[-1]["seq"], segment_first, size + len(data)), 0)

    def sync(self):
        """(feed lock held) Make the current segment and the counter durable: before a
        compaction drops journal lines that hold the only durable copy of its last
        entries."""
        last, first, size = _HEAD.unpack_from(self._head(), 0)
        if first:
            fd = self._segment_fd(first)
            if fd is not None:
                os.fdatasync(fd)
        os.fdatasync(self._fd)

    def _current_segment(self, first, seq):
        """The segment to append `seq` to: the current one, or a new one once the current
        holds a share of the window (and then the segments out of the window go)."""
        if first and seq - first < max(1, self.keep_entries // 8):
            fd = self._segment_fd(first)
            if fd is not None:
                return first, fd
        fd = os.open(self._segment_path(seq), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        if self._segment is not None:
            os.close(self._segment[1])
        self._segment = (seq, fd)
        self._prune(seq)
        return seq, fd

    def _segment_fd(self, first):
        if self._segment is not None and self._segment[0] == first:
            return self._segment[1]
        try:
            fd = os.open(self._segment_path(first), os.O_RDWR)
        except FileNotFoundError:
            return None
        if self._segment is not None:
            os.close(self._segment[1])
        self._segment = (first, fd)
        return fd

    def _segment_path(self, first):
        return os.path.join(self.directory, f"{first:020d}{SEGMENT_SUFFIX}")

    def segments(self):
        """First sequence numbers of the segments there are, oldest first."""
        return sorted(int(n[:-len(SEGMENT_SUFFIX)]) for n in os.listdir(self.directory)
                      if n.endswith(SEGMENT_SUFFIX) and n[:-len(SEGMENT_SUFFIX)].isdigit())

    def _prune(self, newest_first):
        """Drop the oldest segments while what is left still covers the window: the
        newest keep_entries entries and keep_seconds of time."""
        firsts = self.segments()
        horizon = time.time() - self.keep_seconds
        for first, following in zip(firsts, firsts[1:]):
            if following > newest_first:
                break
            entries_after = newest_first - following
            path = self._segment_path(first)
            try:
                old_enough = os.stat(path).st_mtime < horizon
            except FileNotFoundError:
                continue
            if entries_after >= self.keep_entries or old_enough:
                os.unlink(path)
            else:
                break

    def _recover(self):
        """(feed lock just taken) Resolve what a writer killed inside left: see the
        module docstring. The first time after a reboot, also what a power loss left."""
        if not self._boot_checked:
            self._after_reboot()
            self._boot_checked = True
        raw = self._head()
        last, first, size = _HEAD.unpack_from(raw, 0)
        if first:
            fd = self._segment_fd(first)
            if fd is not None and os.fstat(fd).st_size > size:
                os.ftruncate(fd, size)
        pend_first, count, ino, offset, length = _PENDING.unpack_from(raw, _PENDING_AT)
        if pend_first != last + 1 or not count:
            return
        name = raw[_PENDING_AT + _PENDING.size:_PENDING_AT + _PENDING.size + length].decode()
        entries = self._committed_line(name, ino, offset, pend_first)
        os.pwrite(self._fd, _PENDING.pack(0, 0, 0, 0, 0), _PENDING_AT)
        if entries:
            self.append(entries)

    def _after_reboot(self):
        """(feed lock held) A power loss can leave the counter and the segment behind the
        journals, whose lines (fdatasynced: the commit) carry their entries' notes. So at
        the first write after a reboot: cut the segment back to the counter's size, then
        append every entry past the counter found in the journals, in order. Numbers are
        handed out under this lock only after the previous line's fdatasync, so the
        durable lines past the counter are a run without gaps."""
        try:
            with open(BOOT_ID) as f:
                boot = f.read().strip()
        except OSError:
            return
        marker = os.path.join(self.directory, BOOT_FILE)
        try:
            with open(marker) as f:
                if f.read().strip() == boot:
                    return
        except FileNotFoundError:
            pass
        raw = self._head()
        last, first, size = _HEAD.unpack_from(raw, 0)
        if first:
            fd = self._segment_fd(first)
            if fd is not None and os.fstat(fd).st_size > size:
                os.ftruncate(fd, size)
        found = []
        state_dir = os.path.dirname(self.directory)
        for name in sorted(os.listdir(state_dir)):
            if name.endswith(JOURNAL_SUFFIX):
                found.extend(_entries_past(os.path.join(state_dir, name), last))
        found.sort(key=lambda e: e["seq"])
        run = []
        for entry in found:
            if entry["seq"] != last + len(run) + 1:
                break
            run.append(entry)
        if run:
            self.append(run)
        os.pwrite(self._fd, _PENDING.pack(0, 0, 0, 0, 0), _PENDING_AT)
        self.sync()
        temp = marker + ".tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, (boot + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, marker)

    def _committed_line(self, journal_path, ino, offset, first_seq):
        """The feed entries of the complete journal line at `offset`, if it is there."""
        try:
            fd = os.open(journal_path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_ino != ino:
                return None
            chunks = []
            at = offset
            while True:
                chunk = os.pread(fd, 65536, at)
                if not chunk:
                    return None         # no newline: torn, never acknowledged
                end = chunk.find(b"\n")
                if end >= 0:
                    chunks.append(chunk[:end])
                    break
                chunks.append(chunk)
                at += len(chunk)
        finally:
            os.close(fd)
        try:
            line = orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError:
            return None
        if not isinstance(line, dict) or not isinstance(line.get("feed"), list):
            return None
        first, note = line["feed"][0], line["feed"][1:]
        if first != first_seq:
            return None
        kind = os.path.basename(journal_path)[:-len(JOURNAL_SUFFIX)]
        return expand(kind, line, note, first_seq) or None

    def reset(self):
        """Start a new window after the state was replaced (a restore): every reader is
        told to resync. The counter goes on, so no number means two things."""
        with self:
            last = _HEAD.unpack_from(self._head(), 0)[0]
            for first in self.segments():
                try:
                    os.unlink(self._segment_path(first))
                except FileNotFoundError:
                    pass
            if self._segment is not None:
                os.close(self._segment[1])
                self._segment = None
            fd = os.open(self._segment_path(last + 1), os.O_RDWR | os.O_CREAT | os.O_TRUNC,
                         0o600)
            self._segment = (last + 1, fd)
            os.pwrite(self._fd, _HEAD.pack(last, last + 1, 0), 0)

    # ---- reading ----------------------------------------------------------------------

    def oldest(self):
        """The oldest sequence number still in the window (last + 1 when it is empty)."""
        firsts = self.segments()
        return firsts[0] if firsts else self.last() + 1

    def read(self, after, limit=None):
        """Every entry with seq > after, oldest first (at most `limit`); FeedGone when
        entries after `after` have left the window, or `after` is newer than the feed."""
        return self.cursor(after).read(limit)

    def cursor(self, after):
        return FeedCursor(self, after)

    def after_time(self, moment):
        """The revision just before the first entry at or after `moment` (an RFC 3339
        string, as the entries' `at`): what a reader asking "since this time" starts from."""
        cursor = self.cursor(self.oldest() - 1)
        while True:
            batch = cursor.read(1000)
            if not batch:
                return cursor.after
            for entry in batch:
                if entry["at"] >= moment:
                    return entry["seq"] - 1


class FeedCursor:
    """A reader's place in the feed: reads only what was appended since (the segment and
    the byte offset it stopped at)."""

    def __init__(self, feed, after):
        self.feed = feed
        self.after = int(after)
        self._first = None
        self._offset = 0
        last = feed.last()
        if self.after > last:
            raise FeedGone(self.after, feed.oldest(), last)
        self._locate()

    def _locate(self):
        firsts = self.feed.segments()
        last = self.feed.last()
        if self.after >= last and (not firsts or firsts[0] <= self.after + 1):
            self._first = firsts[-1] if firsts else None
            self._offset = None          # found by seq on the first read
            return
        if not firsts or firsts[0] > self.after + 1:
            raise FeedGone(self.after, firsts[0] if firsts else last + 1, last)
        self._first = max(f for f in firsts if f <= self.after + 1)
        self._offset = 0

    def read(self, limit=None):
        last = self.feed.last()
        if last <= self.after:
            return []
        out = []
        while self.after < last and (limit is None or len(out) < limit):
            if self._first is None:
                self._locate()
            path = self.feed._segment_path(self._first)
            try:
                with open(path, "rb") as f:
                    if self._offset is None:
                        self._offset = 0
                    f.seek(self._offset)
                    data = f.read()
            except FileNotFoundError:
                raise FeedGone(self.after, self.feed.oldest(), last) from None
            end = data.rfind(b"\n") + 1
            moved = False
            for line in data[:end].split(b"\n")[:-1] if end else ():
                entry = orjson.loads(line)
                if entry["seq"] > last:
                    break
                self._offset += len(line) + 1
                moved = True
                if entry["seq"] <= self.after:
                    continue
                if entry["seq"] != self.after + 1:
                    raise StoreError(f"change feed: entry {entry['seq']} follows "
                                     f"{self.after}")
                out.append(entry)
                self.after = entry["seq"]
                if limit is not None and len(out) >= limit:
                    return out
            if self.after >= last:
                break
            following = [f for f in self.feed.segments() if f > self._first]
            if following and following[0] <= self.after + 1:
                self._first, self._offset = following[0], 0
            elif not moved:
                if self._first not in self.feed.segments():
                    raise FeedGone(self.after, self.feed.oldest(), last)
                break       # a writer moved the counter before its line is visible: later
        return out


def _entries_past(journal_path, last):
    """The feed entries of a journal's complete lines numbered past `last`."""
    try:
        with open(journal_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    kind = os.path.basename(journal_path)[:-len(JOURNAL_SUFFIX)]
    found = []
    for line in data.split(b"\n")[1:-1]:        # the header, and a last line not ended
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        note = entry.get("feed") if isinstance(entry, dict) else None
        if isinstance(note, list) and note and note[0] > last:
            found.extend(expand(kind, entry, note[1:], note[0]))
    return found


def _pwrite_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
