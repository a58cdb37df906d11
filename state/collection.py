"""One kind of record in one TinyDB file, shared safely by every process.

Reads come from an in-memory snapshot that is reloaded only when the file changed (the
lock file's generation counter or the file's inode/size/mtime moved). Writes take the
kind's cross-process lock, start from a fresh snapshot, write the whole file atomically
and only then return: a write that returned is on disk.

Every record carries `uuid`, `created_at`, `updated_at` (RFC 3339, UTC, fixed width so
that strings sort as times) and `revision`, which starts at 1 and grows on every write.
Records handed out are shallow copies; nested values must be treated as read-only.
"""

import datetime
import os
import re
import threading
import uuid as uuidlib

from .errors import DuplicateKey, NotFound, RevisionConflict
from .lock import KindLock
from .storage import AtomicJSONStorage

BOOKKEEPING = ("uuid", "created_at", "updated_at", "revision")
# lock files (and their generation counters) live apart from the data files: the change
# watch follows them there, where no rename ever happens (see watch.py)
LOCK_DIR = ".locks"
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_written = threading.local()


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


class Snapshot:
    """An immutable view of the file at one moment."""

    def __init__(self, key, table, index):
        self.key = key
        self.table = table      # doc_id (str) -> record, as in the file
        self.index = index      # uuid -> doc_id
        self._ordered = None
        self._unique = {}
        self._grouped = {}
        self._lock = threading.Lock()
        self._next_doc_id = None
        self._latest_created = None

    @classmethod
    def from_file(cls, key, data, kind):
        table = (data or {}).get(kind) or {}
        return cls(key, table, {rec["uuid"]: doc_id for doc_id, rec in table.items()})

    def get(self, uuid):
        doc_id = self.index.get(uuid)
        return None if doc_id is None else self.table[doc_id]

    def ordered(self):
        if self._ordered is None:
            values = list(self.table.values())
            # writers keep file order == default order (see _stamp, insert_many): check
            # it, which is several times cheaper than sorting, and sort only if not
            self._ordered = values if _in_default_order(values) else sorted(values,
                                                                               key=order_key)
        return self._ordered

    def unique_index(self, fields):
        with self._lock:
            index = self._unique.get(fields)
            if index is None:
                index = {tuple(r.get(f) for f in fields): r["uuid"] for r in self.table.values()}
                self._unique[fields] = index
            return index

    def grouped(self, field):
        """{value of field: [records]}, built once per snapshot."""
        with self._lock:
            groups = self._grouped.get(field)
            if groups is None:
                groups = {}
                for r in self.table.values():
                    groups.setdefault(r.get(field), []).append(r)
                self._grouped[field] = groups
            return groups

    def next_doc_id(self):
        if self._next_doc_id is None:
            self._next_doc_id = max((int(d) for d in self.table), default=0) + 1
        return self._next_doc_id

    def latest_created(self):
        if self._latest_created is None:
            self._latest_created = max((r["created_at"] for r in self.table.values()),
                                       default="")
        return self._latest_created


class Collection:
    def __init__(self, directory, kind, unique=(), mode=0o600):
        if not _KIND.match(kind):
            raise ValueError(f"invalid kind name {kind!r}")
        self.kind = kind
        self.unique = [("uuid",)] + [tuple(u) for u in unique if tuple(u) != ("uuid",)]
        self.storage = AtomicJSONStorage(os.path.join(directory, f"{kind}.json"), mode)
        self.lock = KindLock(os.path.join(directory, LOCK_DIR, f"{kind}.lock"))
        self._snapshot = None
        with self.lock:
            self.storage.remove_stale_temp_files()

    @property
    def path(self):
        return self.storage.path

    def add_unique(self, fields):
        fields = tuple(fields)
        if fields not in self.unique:
            self.unique.append(fields)

    # ---- reads -------------------------------------------------------------------

    def snapshot(self):
        """The current content, reloaded only if another write happened since."""
        generation = self.lock.generation()
        snap = self._snapshot
        if snap is not None and snap.key == (generation, self.storage.stat_key()):
            return snap
        data, stat_key = self.storage.read_with_key()
        snap = Snapshot.from_file((generation, stat_key), data, self.kind)
        self._snapshot = snap
        return snap

    def get(self, uuid):
        record = self.snapshot().get(uuid)
        return None if record is None else dict(record)

    def require(self, uuid):
        record = self.get(uuid)
        if record is None:
            raise NotFound(self.kind, uuid)
        return record

    def records(self):
        """Every record in default order. Read-only: do not mutate what it yields."""
        return self.snapshot().ordered()

    def find(self, **equals):
        return [dict(r) for r in self.records()
                if all(r.get(k) == v for k, v in equals.items())]

    def find_one(self, **equals):
        for r in self.records():
            if all(r.get(k) == v for k, v in equals.items()):
                return dict(r)
        return None

    def by(self, field, value):
        """Records whose `field` equals `value`, through an index kept per snapshot.
        Read-only: do not mutate what it returns."""
        return self.snapshot().grouped(field).get(value, [])

    def count(self):
        return len(self.snapshot().table)

    # ---- writes ------------------------------------------------------------------

    def insert(self, record):
        return self.insert_many([record])[0]

    def insert_many(self, records):
        with self.lock:
            snap = self.snapshot()
            stamp = self._stamp(snap)
            created = []
            for record in records:
                new = dict(record)
                new["uuid"] = str(new.get("uuid") or uuidlib.uuid4())
                new["created_at"] = new["updated_at"] = stamp
                new["revision"] = 1
                created.append(new)
            batch = {}
            # one batch shares one stamp: commit it in uuid order, so that file order
            # stays the default order (created_at, then uuid)
            for r in sorted(created, key=lambda r: r["uuid"]):
                if r["uuid"] in batch:
                    raise DuplicateKey(self.kind, ("uuid",), (r["uuid"],), r["uuid"])
                batch[r["uuid"]] = r
            self._commit(snap, batch, inserting=True)
            return [dict(r) for r in created]

    def update(self, uuid, changes, expect_revision=None):
        """Set the given fields; bookkeeping fields in `changes` are ignored."""
        changes = {k: v for k, v in changes.items() if k not in BOOKKEEPING}
        return self.mutate(uuid, lambda rec: {**rec, **changes}, expect_revision)

    def mutate(self, uuid, change, expect_revision=None):
        """Read-modify-write of one record under the lock: `change(copy) -> new record`."""
        with self.lock:
            snap = self.snapshot()
            current = self._current(snap, uuid, expect_revision)
            new = dict(change(dict(current)))
            for field in ("uuid", "created_at"):
                new[field] = current[field]
            new["revision"] = current["revision"] + 1
            new["updated_at"] = self._stamp(snap)
            self._commit(snap, {uuid: new})
            return dict(new)

    def update_many(self, updates):
        """Compare-and-set of many records in one write: `updates` maps uuid to
        (expected revision, changes). A record that moved on or is gone is skipped.
        Returns {uuid: new record} for those written."""
        with self.lock:
            snap = self.snapshot()
            stamp = None
            written = {}
            for uuid, (expected, changes) in updates.items():
                current = snap.get(uuid)
                if current is None or current["revision"] != expected:
                    continue
                stamp = stamp or self._stamp(snap)
                new = {**current, **{k: v for k, v in changes.items() if k not in BOOKKEEPING}}
                new["revision"] = current["revision"] + 1
                new["updated_at"] = stamp
                written[uuid] = new
            if written:
                self._commit(snap, written)
            return {u: dict(r) for u, r in written.items()}

    def delete(self, uuid, expect_revision=None):
        with self.lock:
            snap = self.snapshot()
            current = self._current(snap, uuid, expect_revision)
            self._commit(snap, {uuid: None})
            return dict(current)

    def delete_where(self, predicate):
        """Delete every record for which predicate(record) is true; returns them."""
        with self.lock:
            snap = self.snapshot()
            doomed = [dict(r) for r in snap.table.values() if predicate(r)]
            if doomed:
                self._commit(snap, {r["uuid"]: None for r in doomed})
            return doomed

    # ---- internals ---------------------------------------------------------------

    def _current(self, snap, uuid, expect_revision):
        """The record as it is under the lock, checked against an expected revision."""
        current = snap.get(uuid)
        if current is None:
            raise NotFound(self.kind, uuid)
        if expect_revision is not None and current["revision"] != expect_revision:
            raise RevisionConflict(self.kind, uuid, expect_revision, current["revision"])
        return current

    def _stamp(self, snap):
        """Now, but never earlier than the newest record, so that creation order is
        file order even if the clock steps back: paging relies on it."""
        stamp = format_time(utcnow())
        latest = snap.latest_created()
        if stamp <= latest:
            stamp = format_time(parse_time(latest) + datetime.timedelta(microseconds=1))
        return stamp

    def _commit(self, snap, changes, inserting=False):
        """Write `changes` (uuid -> new record, or None to delete) on top of `snap`.
        The caller holds the lock and `snap` is fresh."""
        table = dict(snap.table)
        index = dict(snap.index)
        uniques = {fields: dict(snap.unique_index(fields)) for fields in self.unique}
        next_doc = snap.next_doc_id()
        for uuid, new in changes.items():
            old = snap.get(uuid)
            if inserting and old is not None:
                raise DuplicateKey(self.kind, ("uuid",), (uuid,), uuid)
            for fields, seen in uniques.items():
                if old is not None:
                    old_values = tuple(old.get(f) for f in fields)
                    if seen.get(old_values) == uuid:
                        del seen[old_values]
                if new is None:
                    continue
                values = tuple(new.get(f) for f in fields)
                holder = seen.get(values)
                if holder is not None and holder != uuid:
                    raise DuplicateKey(self.kind, fields, values, holder)
                seen[values] = uuid
            if new is None:
                del table[index.pop(uuid)]
            elif old is None:
                doc_id = str(next_doc)
                next_doc += 1
                table[doc_id] = new
                index[uuid] = doc_id
            else:
                table[index[uuid]] = new
        self.storage.write({self.kind: table})
        _written.count = writes_in_thread() + 1
        stat_key = self.storage.stat_key()
        generation = self.lock.bump_generation()
        fresh = Snapshot((generation, stat_key), table, index)
        fresh._unique = uniques
        fresh._next_doc_id = next_doc
        fresh._latest_created = max(
            [snap.latest_created()] + [r["created_at"] for r in changes.values() if r])
        self._snapshot = fresh
