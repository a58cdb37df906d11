"""The state directory: one Collection per resource kind."""

import contextlib
import fcntl
import os
import threading

from . import rollback
from .collection import JOURNAL_SUFFIX, LOCK_DIR, Collection, valid_kind
from .errors import StateInUse, StoreError
from .feed import Feed
from .lock import KindLock, acquire_all, release_all
from .storage import AtomicJSONStorage

# held shared by every open Store for its life, exclusively by a restore: so a restore can
# tell that the appliance runs, and a process that starts meanwhile waits for it
IN_USE_LOCK = "in-use.lock"
SCHEMA_FILE = "schema-version"


class Store:
    def __init__(self, directory, exclusive=False):
        """exclusive=True: only when no other Store of the directory is open in any process
        (else StateInUse), and none opens until this one is closed (a restore)."""
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(self.directory, LOCK_DIR), mode=0o700, exist_ok=True)
        self._collections = {}
        self._named_locks = {}
        self._lock = threading.Lock()
        self.exclusive = exclusive
        self._in_use = None
        self._closes = 0            # how often close() ran: a stamp() of before is void
        self._feed = None
        self._feed_settings = {}
        self._use()

    @property
    def feed(self):
        """The change feed of the state (state/feed.py): every committed write, numbered."""
        with self._lock:
            return self._open_feed()

    def _open_feed(self):
        if self._feed is None:
            self._feed = Feed(self.directory)
            self._feed.configure(**self._feed_settings)
        return self._feed

    def configure_feed(self, keep_entries=None, keep_seconds=None):
        """The feed's window (settings feed_keep_entries, feed_keep_seconds)."""
        with self._lock:
            self._feed_settings = {"keep_entries": keep_entries,
                                   "keep_seconds": keep_seconds}
            if self._feed is not None:
                self._feed.configure(keep_entries, keep_seconds)

    def _use(self):
        path = os.path.join(self.directory, LOCK_DIR, IN_USE_LOCK)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if self.exclusive:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise StateInUse(self.directory, lock_holders(fd)) from None
            else:
                fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        self._in_use = fd

    def collection(self, kind, unique=()):
        # the common case without the store's lock (an API request opens six kinds, from
        # up to 32 threads): a kind already open, with every unique key asked for
        coll = self._collections.get(kind)
        if coll is not None and self._in_use is not None and all(
                tuple(fields) in coll.unique for fields in unique):
            return coll
        with self._lock:
            if self._in_use is None:        # used again after close()
                self._use()
            coll = self._collections.get(kind)
            if coll is None:
                coll = Collection(self.directory, kind, unique, feed=self._open_feed())
                self._collections[kind] = coll
            else:
                for fields in unique:
                    coll.add_unique(fields)
            return coll

    def stamp(self, kinds):
        """What moves with any change of the kinds named in `kinds`, here or in another
        process: a cache of something worked out from their records keeps the stamp
        taken before it read them, and asks unchanged(stamp) before each use."""
        colls = tuple(self.collection(kind) for kind in kinds)
        return self._closes, colls, tuple(coll.version() for coll in colls)

    def unchanged(self, stamp):
        """True when no kind of `stamp` changed since it was taken: in the common case one
        look at each kind's lock counters, no call of collection() per kind."""
        return self._each_kind(stamp, Collection.unchanged)

    def settled(self, stamp):
        """unchanged(stamp) where it can be told from memory alone: True only when each
        kind's version is still the one applied and its lock's counters (shared memory)
        show no writer since. False where unchanged() would have to look at the files or
        take a kind's lock: for a caller that must never wait (the event loop's answers,
        appliance/api/answers.py), which then leaves the request to the ordinary path."""
        return self._each_kind(stamp, Collection.settled)

    def _each_kind(self, stamp, still):
        closes, colls, versions = stamp
        if closes != self._closes or self._in_use is None:
            return False
        for coll, version in zip(colls, versions):
            if not still(coll, version):
                return False
        return True

    def named_lock(self, name):
        """A cross-process lock that guards no kind: for a rule that spans several kinds.
        Take it before any kind's lock, never while holding one (else two processes
        taking them in the other order would deadlock)."""
        with self._lock:
            lock = self._named_locks.get(name)
            if lock is None:
                lock = KindLock(os.path.join(self.directory, LOCK_DIR, f"named-{name}.lock"))
                self._named_locks[name] = lock
            return lock

    def close(self):
        """Release the lock files of every opened kind (a long-lived process that opens
        many stores, like a test run, would otherwise run out of descriptors)."""
        with self._lock:
            self._closes += 1
            for coll in self._collections.values():
                coll.close()
            self._collections.clear()
            for lock in self._named_locks.values():
                lock.close()
            self._named_locks.clear()
            if self._feed is not None:
                self._feed.close()
                self._feed = None
            if self._in_use is not None:
                os.close(self._in_use)
                self._in_use = None

    def path_of(self, kind):
        """The kind's TinyDB base file (as of its last compaction; see files_of)."""
        return os.path.join(self.directory, f"{kind}.json")

    def files_of(self, kind):
        """Every file that holds the kind's records: the base and its journal."""
        return [self.path_of(kind), os.path.join(self.directory, kind + JOURNAL_SUFFIX)]

    def kinds(self):
        return sorted(name[:-5] for name in os.listdir(self.directory)
                      if name.endswith(".json") and valid_kind(name[:-5]))

    def private_names(self):
        """The private files (every top-level file that is not a kind's nor hidden)."""
        kinds = set(self.kinds())
        names = []
        for entry in os.scandir(self.directory):
            if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                continue
            stem, dot, suffix = entry.name.rpartition(".")
            if dot and stem in kinds and "." + suffix in (".json", JOURNAL_SUFFIX):
                continue
            names.append(entry.name)
        return sorted(names)

    def remove_files(self, names):
        """Unlink files of the state directory (kind files or private files), if there."""
        for name in names:
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass

    def write_base(self, kind, payload):
        """Make `payload` (a base's bytes) the whole kind: base replaced, journal gone.
        Only for a Store that nothing else uses (a restore, under its rollback point)."""
        if not valid_kind(kind):
            raise ValueError(f"invalid kind name {kind!r}")
        AtomicJSONStorage(self.path_of(kind)).write_bytes(payload)
        self.remove_files([kind + JOURNAL_SUFFIX])

    # ---- schema version and whole-state changes ---------------------------------------

    def schema_version(self):
        """The schema version of the state (appliance/migrations); 0 before the first."""
        raw = self.read_private(SCHEMA_FILE)
        if raw is None:
            return 0
        try:
            return int(raw.decode().strip())
        except (UnicodeDecodeError, ValueError):
            raise StoreError(f"{self.private_path(SCHEMA_FILE)}: not a schema version: "
                             f"{raw[:40]!r}") from None

    def set_schema_version(self, version):
        self.write_private(SCHEMA_FILE, f"{int(version)}\n".encode())

    @contextlib.contextmanager
    def all_locked(self, changed=True):
        """Hold the lock of every kind there is (writers wait, readers do not). With
        changed=False the section only reads, and no watcher is woken."""
        locks = [self.collection(kind).lock for kind in self.kinds()]
        acquire_all(locks, changing=changed)
        try:
            yield
        finally:
            release_all(locks, changed)

    def interrupted(self):
        """True when a whole-state change (migration, restore) died half-way."""
        return rollback.pending(self.directory)

    @contextlib.contextmanager
    def rollback_point(self):
        """Every data file as it is now, put back if the block raises (or the process
        dies inside it: recover() at the next start). The caller holds what keeps other
        writers out (all_locked, or an exclusive Store). See docs/migrations.md."""
        self.recover()
        rollback.begin(self.directory, self._data_files())
        try:
            yield
        except BaseException:
            self._roll_back()
            raise
        rollback.discard(self.directory)

    def recover(self):
        """Finish what a rollback point left behind: put back its copy if it was complete
        (the change died half-way), drop it if it was not (nothing changed yet)."""
        if rollback.pending(self.directory):
            self._roll_back()
        rollback.discard(self.directory)

    def _roll_back(self):
        rollback.restore(self.directory, self._data_files())
        rollback.discard(self.directory)
        # the files moved behind this process's collections, whose own writes (bumps)
        # would otherwise make their stale memory look current
        with self._lock:
            collections = list(self._collections.values())
        for coll in collections:
            with coll.lock:
                coll.lock.bump_generation()
        # entries of the writes undone stay numbered: their readers start again
        self.feed.reset()

    def _data_files(self):
        names = self.private_names()
        for kind in self.kinds():
            names += [name for name in (kind + ".json", kind + JOURNAL_SUFFIX)
                      if os.path.exists(os.path.join(self.directory, name))]
        return names

    def private_path(self, name):
        """A file of the state directory that is not a kind (keys, passwords)."""
        return os.path.join(self.directory, name)

    def read_private(self, name):
        """Bytes of a private file (keys, generated passwords), or None."""
        try:
            with open(self.private_path(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_private(self, name, data, exclusive=False):
        """Write a private file atomically, mode 0600. With exclusive=True an existing
        file wins and its content is returned instead (first start of several processes)."""
        storage = AtomicJSONStorage(self.private_path(name))
        lock = KindLock(os.path.join(self.directory, LOCK_DIR, f"private-{name}.lock"))
        try:
            with lock:
                if exclusive:
                    existing = self.read_private(name)
                    if existing is not None:
                        return existing
                storage.write_bytes(data)
                return data
        finally:
            lock.close()


def lock_holders(fd):
    """PIDs holding a flock on the file of `fd` (from /proc/locks; empty if unknown)."""
    st = os.fstat(fd)
    pids = set()
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            ino = int(fields[5].rsplit(":", 1)[1])
        except (IndexError, ValueError):
            continue
        if ino == st.st_ino and fields[4].isdigit() and int(fields[4]) != os.getpid():
            pids.add(int(fields[4]))
    return sorted(pids)
