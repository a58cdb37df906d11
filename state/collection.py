"""One kind of record: a TinyDB base file plus an append-only journal, shared by every process.

`<kind>.json` holds the kind as of the last compaction (a stock TinyDB file) and
`<kind>.journal` every change since: a header line, then one JSON line per write call
(`{"put": [records]}` or `{"del": [uuids]}`). A write takes the kind's cross-process lock,
catches up with the journal, checks its change against the state, appends one line,
fdatasyncs it and only then returns: a write that returned is on disk, whatever the size of
the kind. Each process keeps the kind in memory and, when the lock file's generation or the
journal's size moved, reads only the journal bytes past its offset. Past a size, the writer
rewrites the base and starts a new journal whose header names the journal it follows, so
readers that kept up carry on from their state without reading the base. See docs/store.md.

Every record carries `uuid`, `created_at`, `updated_at` (RFC 3339, UTC, fixed width so
that strings sort as times) and `revision`, which starts at 1 and grows on every write.
Records handed out are shallow copies, or shared lists that must be treated as read-only.
"""

import datetime
import os
import re
import threading
import time

import orjson

from .errors import DuplicateKey, NotFound, RevisionConflict, StoreError
from .feed import describe, origin
from .lock import KindLock
from .wake import sleepers_dir
from .storage import AtomicJSONStorage

BOOKKEEPING = ("uuid", "created_at", "updated_at", "revision")
# lock files (and their generation counters) live apart from the data files: the change
# watch follows them there, where no rename ever happens (see watch.py)
LOCK_DIR = ".locks"
JOURNAL_SUFFIX = ".journal"
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_written = threading.local()
# (kind, seconds, fsync seconds) after each durable write; None: writes are not timed.
# A hook, not a metrics library: state/ is the floor below the appliance (docs/metrics.md)
_write_observer = None


def observe_writes(observer):
    """Call `observer(kind, seconds, fsync_seconds)` after every write that changed the
    store, from the call to the return (the kind's lock, the append, the fdatasync);
    None stops it."""
    global _write_observer
    _write_observer = observer


def writes_in_thread():
    """How many writes this thread has committed: a caller that retries work after a
    conflict compares two readings to know that the failed attempt wrote nothing."""
    return getattr(_written, "count", 0)


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def format_time(moment):
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc)


def order_key(record):
    """The default order of every listing: creation time, then uuid."""
    return (record["created_at"], record["uuid"])


def _in_default_order(records):
    last_created, last_uuid = "", ""
    for r in records:
        created = r["created_at"]
        if created < last_created or (created == last_created and r["uuid"] < last_uuid):
            return False
        last_created, last_uuid = created, r["uuid"]
    return True


def _values(record, fields):
    return tuple(map(record.get, fields))


def _new_uuids(count):
    """`count` random (version 4) uuids as strings; str(uuid.uuid4()) costs several
    times more, which shows in a batch of 100,000."""
    raw = bytearray(os.urandom(16 * count))
    made = []
    for i in range(0, 16 * count, 16):
        raw[i + 6] = (raw[i + 6] & 0x0F) | 0x40
        raw[i + 8] = (raw[i + 8] & 0x3F) | 0x80
        h = raw[i:i + 16].hex()
        made.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return made


def _last(mapping):
    return next(reversed(mapping.values()))


def _pwrite_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _pread_all(fd, size, offset):
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        size, offset = size - len(chunk), offset + len(chunk)
    return b"".join(chunks)


def base_payload(kind, records):
    """The bytes of a kind's base holding `records`: a stock TinyDB file, ids from 1."""
    return orjson.dumps({kind: {str(i): r for i, r in enumerate(records, 1)}})


def valid_kind(name):
    return bool(_KIND.match(name))


class Snapshot:
    """The records of one moment in default order, and a key that changes with them."""

    __slots__ = ("key", "_records")

    def __init__(self, key, records):
        self.key = key
        self._records = records

    def ordered(self):
        return self._records

    def __len__(self):
        return len(self._records)


class _Group:
    """Records sharing one value of a field (for `by`), in default order."""

    __slots__ = ("members", "sorted", "listed")

    def __init__(self):
        self.members = {}       # uuid -> record
        self.sorted = True
        self.listed = None      # the list handed out, rebuilt after a change

    def add(self, record):
        members = self.members
        # a record that moves here from another group may belong before the last one
        if self.sorted and members and order_key(record) < order_key(_last(members)):
            self.sorted = False
        members[record["uuid"]] = record
        self.listed = None

    def records(self):
        if self.listed is None:
            listed = list(self.members.values())
            if not self.sorted:
                listed.sort(key=order_key)
            self.listed = listed
        return self.listed


class Collection:
    # compaction starts once the journal is larger than this and than the base: the
    # rewrite is O(n) but comes once per n-ish written bytes, and a fresh process never
    # replays more than about the base's size
    COMPACT_MIN_BYTES = 1 << 20

    def __init__(self, directory, kind, unique=(), mode=0o600, feed=None):
        if not _KIND.match(kind):
            raise ValueError(f"invalid kind name {kind!r}")
        self.kind = kind
        # the change feed (state/feed.py) every committed write is numbered in; None for
        # a Collection opened on its own (tests of the journal alone)
        self.feed = feed
        self.unique = [("uuid",)] + [tuple(u) for u in unique if tuple(u) != ("uuid",)]
        self.storage = AtomicJSONStorage(os.path.join(directory, f"{kind}.json"), mode)
        self.journal = AtomicJSONStorage(os.path.join(directory, kind + JOURNAL_SUFFIX), mode)
        self.lock = KindLock(os.path.join(directory, LOCK_DIR, f"{kind}.lock"),
                             sleepers=sleepers_dir(directory, kind))
        # guards the in-memory state; taken after self.lock, never before it
        self._mutex = threading.Lock()
        self._fd = None             # the journal this state follows (kept open: see _follow)
        self._ino = None
        self._epoch = None          # the journal's number; None: nothing loaded yet
        self._offset = 0            # end of the last journal line applied
        self._base_size = 0
        self._probed = None         # the probe (generation, journal ino and size) applied
        self._set_table({})
        self.full_loads = 0         # how often the base was read (tests, benches)
        self.tail_bytes = 0         # journal bytes read past a loaded state
        # Opening a kind writes nothing unless a writer died half-way: taking the lock
        # writes the lock file, which wakes whoever watches the kind (the change watch,
        # the image's path units that start a daemon on first use). A temp file seen
        # here may be a live writer's; under the lock, that writer has renamed it.
        if self.storage.temp_files() or self.journal.temp_files():
            self.lock.acquire(changing=False)
            try:
                self.storage.remove_stale_temp_files()
                self.journal.remove_stale_temp_files()
            finally:
                self.lock.release(changed=False)

    @property
    def path(self):
        return self.storage.path

    @property
    def files(self):
        """Every file that holds this kind's records."""
        return [self.storage.path, self.journal.path]

    def add_unique(self, fields):
        fields = tuple(fields)
        if fields not in self.unique:
            self.unique.append(fields)

    def close(self):
        self.lock.close()
        with self._mutex:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # ---- reads -------------------------------------------------------------------

    def snapshot(self):
        """The current records and their key, reloaded only if another write happened."""
        self._fresh()
        snap = self._snap
        if snap is None:
            with self._mutex:
                if self._snap is None:
                    self._snap = Snapshot((self._epoch, self._offset), self._ordered_records())
                snap = self._snap
        return snap

    def get(self, uuid):
        self._fresh()
        record = self._table.get(uuid)
        return None if record is None else dict(record)

    def require(self, uuid):
        record = self.get(uuid)
        if record is None:
            raise NotFound(self.kind, uuid)
        return record

    def records(self):
        """Every record in default order. Read-only: do not mutate what it yields."""
        self._fresh()
        listed = self._ordered
        if listed is None:
            with self._mutex:
                listed = self._ordered_records()
        return listed

    def find(self, **equals):
        return [dict(r) for r in self.records()
                if all(r.get(k) == v for k, v in equals.items())]

    def find_one(self, **equals):
        for r in self.records():
            if all(r.get(k) == v for k, v in equals.items()):
                return dict(r)
        return None

    def by(self, field, value):
        """Records whose `field` equals `value`, through an index kept up to date with
        every change. Read-only: do not mutate what it returns."""
        self._fresh()
        groups = self._groups.get(field)
        if groups is not None:
            group = groups.get(value)
            if group is None:
                return []
            listed = group.listed
            if listed is not None:
                return listed
        with self._mutex:
            groups = self._groups.get(field)
            if groups is None:
                groups = {}
                for r in self._ordered_records():
                    group = groups.get(r.get(field))
                    if group is None:
                        group = groups[r.get(field)] = _Group()
                    group.members[r["uuid"]] = r
                self._groups[field] = groups
            group = groups.get(value)
            return [] if group is None else group.records()

    def by_key(self, fields, values):
        """The record whose unique key `fields` (one of `unique`) holds `values`, or None,
        through the index the writes keep. Read-only: do not mutate what it returns."""
        fields = tuple(fields)
        if fields not in self.unique:
            raise ValueError(f"{self.kind}: {fields} is not a unique key")
        self._fresh()
        with self._mutex:
            uuid = self._unique_index(fields).get(tuple(values))
            return None if uuid is None else self._table.get(uuid)

    def version(self):
        """What moves with every change of the kind: the lock's generation and the
        journal's inode and size, as last applied. Equal versions, equal records (a cache
        of something derived from the records keys on it)."""
        self._fresh()
        return self._probed

    def unchanged(self, version):
        """Whether `version` (an earlier version()) is still the kind's: while it is the one
        applied and no writer came since, without a look at the journal (_fresh's own
        first check); else by the whole version."""
        return self.settled(version) or self.version() == version

    def settled(self, version):
        """The one cheap freshness rule: `version` is the one applied and no writer came
        since (one look at the lock's counters in shared memory: no system call, no lock,
        no look at the journal)."""
        return version is not None and version is self._probed \
            and self.lock.settled_at(version[0])

    def count(self):
        self._fresh()
        return len(self._table)

    # ---- writes ------------------------------------------------------------------

    def insert(self, record):
        return self.insert_many([record])[0]

    def insert_many(self, records):
        def plan():
            stamp = self._stamp()
            created = []
            fresh_uuids = iter(_new_uuids(sum(1 for r in records if not r.get("uuid"))))
            for record in records:
                new = dict(record)
                new["uuid"] = str(new.get("uuid") or next(fresh_uuids))
                new["created_at"] = new["updated_at"] = stamp
                new["revision"] = 1
                created.append(new)
            batch = {}
            # one batch shares one stamp: commit it in uuid order, so that journal order
            # stays the default order (created_at, then uuid)
            for r in sorted(created, key=lambda r: r["uuid"]):
                if r["uuid"] in batch:
                    raise DuplicateKey(self.kind, ("uuid",), (r["uuid"],), r["uuid"])
                batch[r["uuid"]] = r
            self._check(batch, inserting=True)
            return ({"put": list(batch.values())} if batch else None,
                    [dict(r) for r in created])
        return self._write(plan)

    def update(self, uuid, changes, expect_revision=None):
        """Set the given fields; bookkeeping fields in `changes` are ignored."""
        changes = {k: v for k, v in changes.items() if k not in BOOKKEEPING}
        return self.mutate(uuid, lambda rec: {**rec, **changes}, expect_revision)

    def mutate(self, uuid, change, expect_revision=None):
        """Read-modify-write of one record under the lock: `change(copy) -> new record`."""
        def plan():
            current = self._current(uuid, expect_revision)
            new = dict(change(dict(current)))
            for field in ("uuid", "created_at"):
                new[field] = current[field]
            new["revision"] = current["revision"] + 1
            new["updated_at"] = self._stamp()
            self._check({uuid: new})
            return {"put": [new]}, dict(new)
        return self._write(plan)

    def update_many(self, updates):
        """Compare-and-set of many records in one write: `updates` maps uuid to
        (expected revision, changes). A record that moved on or is gone is skipped.
        Returns {uuid: new record} for those written."""
        def plan():
            stamp = None
            written = {}
            for uuid, (expected, changes) in updates.items():
                current = self._table.get(uuid)
                if current is None or current["revision"] != expected:
                    continue
                stamp = stamp or self._stamp()
                new = {**current, **{k: v for k, v in changes.items() if k not in BOOKKEEPING}}
                new["revision"] = current["revision"] + 1
                new["updated_at"] = stamp
                written[uuid] = new
            self._check(written)
            return ({"put": list(written.values())} if written else None,
                    {u: dict(r) for u, r in written.items()})
        return self._write(plan)

    def delete(self, uuid, expect_revision=None):
        def plan():
            current = self._current(uuid, expect_revision)
            return {"del": [uuid]}, dict(current)
        return self._write(plan)

    def delete_where(self, predicate):
        """Delete every record for which predicate(record) is true; returns them."""
        def plan():
            doomed = [dict(r) for r in self.records() if predicate(r)]
            return ({"del": [r["uuid"] for r in doomed]} if doomed else None), doomed
        return self._write(plan)

    def compact(self):
        """Rewrite the base with every record and start an empty journal. Writes do it
        by themselves past a size; call it to hand stock TinyDB an up-to-date file."""
        with self.lock:
            self._prepare_write()
            self._compact()

    # ---- internals: the in-memory state ------------------------------------------

    def _set_table(self, table):
        """Start over from `table` (uuid -> record); indexes are rebuilt on demand."""
        self._table = table
        self._sorted = _in_default_order(table.values())
        # the newest (created_at, uuid) appended: a record put after it and not past it
        # makes the dict's order differ from the default order
        self._last_key = ((order_key(_last(table)) if self._sorted else
                           max(map(order_key, table.values()))) if table else ("", ""))
        self._latest = (_last(table)["created_at"] if self._sorted else
                        max(r["created_at"] for r in table.values())) if table else ""
        self._uniques = {}          # fields -> {values: uuid}, built by the first write
        self._groups = {}           # field -> {value: _Group}, built by the first by()
        self._ordered = None
        self._snap = None

    def _ordered_records(self):
        """(mutex held) The records in default order, as one list shared until a change."""
        if self._ordered is None:
            if not self._sorted:
                self._table = {r["uuid"]: r for r in sorted(self._table.values(),
                                                             key=order_key)}
                self._sorted = True
            self._ordered = list(self._table.values())
        return self._ordered

    def _unique_index(self, fields):
        """(mutex held)"""
        index = self._uniques.get(fields)
        if index is None:
            index = {_values(r, fields): r["uuid"] for r in self._table.values()}
            self._uniques[fields] = index
        return index

    def _apply(self, entry):
        """(mutex held) One journal entry: deletions, then records put whole."""
        for uuid in entry.get("del") or ():
            self._remove(uuid)
        for record in entry.get("put") or ():
            self._put(record)
        self._ordered = None
        self._snap = None

    def _put(self, record):
        uuid = record["uuid"]
        table = self._table
        old = table.get(uuid)
        if old is None:
            key = (record["created_at"], uuid)
            if key < self._last_key:
                self._sorted = False
            else:
                self._last_key = key
        table[uuid] = record            # an update keeps its place in the dict's order
        if record["created_at"] > self._latest:
            self._latest = record["created_at"]
        for fields, index in self._uniques.items():
            if old is not None:
                before = _values(old, fields)
                if index.get(before) == uuid:
                    del index[before]
            index[_values(record, fields)] = uuid
        for field, groups in self._groups.items():
            value = record.get(field)
            if old is not None:
                if old.get(field) == value:
                    group = groups[value]
                    group.members[uuid] = record
                    group.listed = None
                    continue
                self._leave(groups, old.get(field), uuid)
            group = groups.get(value)
            if group is None:
                group = groups[value] = _Group()
            group.add(record)

    def _remove(self, uuid):
        old = self._table.pop(uuid, None)
        if old is None:
            return
        for fields, index in self._uniques.items():
            before = _values(old, fields)
            if index.get(before) == uuid:
                del index[before]
        for field, groups in self._groups.items():
            self._leave(groups, old.get(field), uuid)

    @staticmethod
    def _leave(groups, value, uuid):
        group = groups.get(value)
        if group is not None:
            group.members.pop(uuid, None)
            group.listed = None
            if not group.members:
                del groups[value]

    # ---- internals: following the files ------------------------------------------

    def _probe(self):
        """What moves whenever the kind changed: no syscall while no writer is inside
        (state/lock.py), else a stat of the journal too; no read of the data."""
        generation, settled = self.lock.state()
        probed = self._probed
        if settled and probed is not None and probed[0] == generation:
            return probed
        try:
            st = os.stat(self.journal.path)
        except FileNotFoundError:
            return generation, None
        return generation, (st.st_ino, st.st_size)

    def _fresh(self):
        if self.settled(self._probed):
            return
        probe = self._probe()
        if probe != self._probed:
            with self._mutex:
                self._refresh(probe)

    def _refresh(self, probe):
        """(mutex held) Bring the state up to the files, reading as little as possible."""
        journal = probe[1]
        if self._epoch is None:
            self._full_load()
        elif journal is None:
            if self._fd is not None:        # the journal vanished: trust only the files
                self._full_load()
        elif self._fd is not None and journal[0] == self._ino:
            self._read_tail()
        else:
            # compacted since: finish the old journal (still open, so still readable), then
            # carry on with the new one if it starts where the old one ended
            if self._fd is not None:
                self._read_tail()
            if not self._follow():
                self._full_load()
        self._probed = probe

    def _open_journal(self):
        """(fd, inode, header, header length) of the current journal; None if none."""
        try:
            fd = os.open(self.journal.path, os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            head = os.pread(fd, 4096, 0)
            end = head.find(b"\n") + 1
            header = orjson.loads(head[:end]) if end else None
            if not isinstance(header, dict) or "journal" not in header:
                raise StoreError(f"{self.journal.path}: no journal header")
            return fd, os.fstat(fd).st_ino, header, end
        except BaseException:
            os.close(fd)
            raise

    def _adopt(self, opened):
        if self._fd is not None:
            os.close(self._fd)
        if opened is None:
            self._fd, self._ino, self._epoch, self._offset = None, None, 0, 0
        else:
            self._fd, self._ino, header, self._offset = opened
            self._epoch = header["journal"]

    def _follow(self):
        """Switch to the current journal if it continues this state; else False."""
        opened = self._open_journal()
        if opened is None:
            return False
        header = opened[2]
        if header.get("follows") != self._epoch or header.get("at") != self._offset:
            os.close(opened[0])
            return False
        self._adopt(opened)
        try:
            self._base_size = os.stat(self.storage.path).st_size
        except FileNotFoundError:
            self._base_size = 0
        self._read_tail()
        return True

    def _full_load(self):
        """Base, then every journal line. The journal is opened first and must still be
        the current one after the base was read: then the base is its own or (while a
        compaction is between its two renames) the next one, which already holds every
        line of this journal, and replaying whole records onto it changes nothing."""
        for _ in range(100):
            opened = self._open_journal()
            data, size = self.storage.read_sized()
            try:
                now = os.stat(self.journal.path).st_ino
            except FileNotFoundError:
                now = None
            if now == (opened[1] if opened else None):
                break
            if opened:
                os.close(opened[0])
        else:
            raise StoreError(f"{self.kind}: the journal kept changing while loading")
        table = (data or {}).get(self.kind) or {}
        self._set_table({r["uuid"]: r for r in table.values()})
        self._base_size = size
        self._adopt(opened)
        self.full_loads += 1
        if opened is not None:
            self._read_tail(count=False)

    def _read_tail(self, count=True):
        """(mutex held) Apply the complete journal lines past the offset. A last line
        without its newline, or that does not parse, is a write that died before it was
        acknowledged: it is left alone (and cut off by the next writer)."""
        fd, offset = self._fd, self._offset
        size = os.fstat(fd).st_size
        if size <= offset:
            return
        data = _pread_all(fd, size - offset, offset)
        if count:
            self.tail_bytes += len(data)
        end = data.rfind(b"\n") + 1
        if not end:
            return
        lines = data[:end].split(b"\n")
        lines.pop()
        for i, line in enumerate(lines):
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                entry = None
            if not isinstance(entry, dict):
                if i == len(lines) - 1:
                    break
                raise StoreError(f"{self.journal.path}: damaged line at byte {offset}")
            self._apply(entry)
            offset += len(line) + 1
        self._offset = offset

    # ---- internals: writing ------------------------------------------------------

    def _prepare_write(self):
        """(lock held) Catch up with every acknowledged write and make the journal end
        where the state ends."""
        with self._mutex:
            self._refresh(self._probe())
            if self._fd is None:
                if not os.path.exists(self.storage.path):
                    # the kind exists (Store.kinds) and stock TinyDB can open it
                    self.storage.write({self.kind: {}})
                self._start_journal()
            elif os.fstat(self._fd).st_size > self._offset:
                # the torn line of a writer that died: it was never acknowledged
                os.ftruncate(self._fd, self._offset)
                os.fsync(self._fd)

    def _write(self, plan):
        """Run `plan() -> (journal entry or None, result)` on the current state under the
        kind's lock, append the entry durably, apply it, and return the result."""
        observer = _write_observer
        if observer is None:
            return self._write_locked(plan)[0]
        started = time.perf_counter()
        result, fsync_seconds = self._write_locked(plan)
        if fsync_seconds is not None:
            observer(self.kind, time.perf_counter() - started, fsync_seconds)
        return result

    def _write_locked(self, plan):
        """_write's work: (the result, the fdatasync's seconds or None when nothing was
        written)."""
        with self.lock:
            self._prepare_write()
            entry, result = plan()
            if entry is None:
                return result, None
            start = self._offset
            if self.feed is None:
                line = orjson.dumps(entry) + b"\n"
                _pwrite_all(self._fd, line, start)
                synced = time.perf_counter()
                os.fdatasync(self._fd)
                fsync_seconds = time.perf_counter() - synced
            else:
                line, fsync_seconds = self._commit_with_feed(entry, start)
            _written.count = writes_in_thread() + 1
            with self._mutex:
                if self._offset == start:       # else another thread read the line already
                    self._apply(entry)
                    self._offset = start + len(line)
            self._probed = (self.lock.bump_generation(), (self._ino, self._offset))
            if self._offset > max(self.COMPACT_MIN_BYTES, self._base_size):
                self._compact()
            return result, fsync_seconds

    def _commit_with_feed(self, entry, start):
        """(kind lock held) Append the journal line carrying its feed ticket and note, in
        the steps state/feed.py's recovery relies on (the fdatasync outside the feed's
        lock); returns the line and its fdatasync's seconds once its entries are in the
        feed."""
        def make(ticket):
            described, note = describe(self.kind, entry, self._table,
                                       format_time(utcnow()), origin())
            if not described:
                return orjson.dumps(entry) + b"\n", described
            return orjson.dumps({**entry, "feed": [ticket, *note]}) + b"\n", described

        def write(line):
            _pwrite_all(self._fd, line, start)
            synced = time.perf_counter()
            os.fdatasync(self._fd)
            return time.perf_counter() - synced

        return self.feed.commit(self.kind, self._ino, start, make, write)

    def _start_journal(self):
        """(lock and mutex held) Atomically put an empty journal in place, whose header
        says which journal, ending at which offset, it continues."""
        header = {"journal": self._epoch + 1, "follows": self._epoch, "at": self._offset}
        self.journal.write_bytes(orjson.dumps(header) + b"\n")
        opened = self._open_journal()
        if opened is None or opened[2] != header:
            raise StoreError(f"{self.journal.path} changed under the kind's lock")
        self._adopt(opened)

    def _compact(self):
        """(lock held, state current) Base first, then the new journal: a crash between
        the two leaves the new base with the old journal, whose lines it already holds."""
        if self.feed is not None:
            # the journal lines are the only durable copy of the feed's newest entries,
            # and a slot of the feed may point into this journal: both settled first
            self.feed.compacting(self.kind, self._replace_journal)
        else:
            self._replace_journal()
        self._probed = (self.lock.bump_generation(), (self._ino, self._offset))

    def _replace_journal(self):
        with self._mutex:
            records = self._ordered_records()
        payload = base_payload(self.kind, records)
        self.storage.write_bytes(payload)
        with self._mutex:
            self._start_journal()
            self._base_size = len(payload)

    def _current(self, uuid, expect_revision):
        """The record as it is under the lock, checked against an expected revision."""
        current = self._table.get(uuid)
        if current is None:
            raise NotFound(self.kind, uuid)
        if expect_revision is not None and current["revision"] != expect_revision:
            raise RevisionConflict(self.kind, uuid, expect_revision, current["revision"])
        return current

    def _check(self, changes, inserting=False):
        """Unique keys of `changes` (uuid -> new record, or None to delete) against the
        state and against each other, in order, without copying any index."""
        if inserting:
            for uuid in changes:
                if uuid in self._table:
                    raise DuplicateKey(self.kind, ("uuid",), (uuid,), uuid)
        for fields in self.unique:
            if fields == ("uuid",):
                continue
            with self._mutex:
                index = self._unique_index(fields)
            claimed = {}        # values -> uuid, or None once freed, by this change
            for uuid, new in changes.items():
                old = self._table.get(uuid)
                if old is not None:
                    before = _values(old, fields)
                    if claimed.get(before, index.get(before)) == uuid:
                        claimed[before] = None
                if new is None:
                    continue
                values = _values(new, fields)
                holder = claimed.get(values, index.get(values))
                if holder is not None and holder != uuid:
                    raise DuplicateKey(self.kind, fields, values, holder)
                claimed[values] = uuid

    def _stamp(self):
        """Now, but never earlier than the newest record, so that creation order is
        journal order even if the clock steps back: paging relies on it."""
        stamp = format_time(utcnow())
        if stamp <= self._latest:
            stamp = format_time(parse_time(self._latest) + datetime.timedelta(microseconds=1))
        return stamp
