"""The state directory: one Collection per resource kind."""

import os
import threading

from .collection import JOURNAL_SUFFIX, LOCK_DIR, Collection
from .lock import KindLock
from .storage import AtomicJSONStorage


class Store:
    def __init__(self, directory):
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(self.directory, LOCK_DIR), mode=0o700, exist_ok=True)
        self._collections = {}
        self._named_locks = {}
        self._lock = threading.Lock()

    def collection(self, kind, unique=()):
        with self._lock:
            coll = self._collections.get(kind)
            if coll is None:
                coll = Collection(self.directory, kind, unique)
                self._collections[kind] = coll
            else:
                for fields in unique:
                    coll.add_unique(fields)
            return coll

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
            for coll in self._collections.values():
                coll.close()
            self._collections.clear()
            for lock in self._named_locks.values():
                lock.close()
            self._named_locks.clear()

    def path_of(self, kind):
        """The kind's TinyDB base file (as of its last compaction; see files_of)."""
        return os.path.join(self.directory, f"{kind}.json")

    def files_of(self, kind):
        """Every file that holds the kind's records: the base and its journal."""
        return [self.path_of(kind), os.path.join(self.directory, kind + JOURNAL_SUFFIX)]

    def kinds(self):
        return sorted(name[:-5] for name in os.listdir(self.directory)
                      if name.endswith(".json") and not name.startswith("."))

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
