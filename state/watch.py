"""Change watch: call subscribers within milliseconds of a write to a kind.

Every write ends by bumping the generation counter in `.locks/<kind>.lock`; watchdog
(inotify here) reports that modification at once. The data files are not watched: the
atomic renames of a compaction make watchdog hold events up to 0.5 s while it pairs the two halves of a
move, and one held event delays every event queued behind it. A periodic re-scan driven
by `schedule` compares keys and covers any event that was lost. Each subscriber is called
at most once per observed change, on one dispatcher thread, so a slow subscriber delays
only later notifications, never the writer.
"""

import logging
import os
import queue
import threading

import schedule
from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

from .collection import LOCK_DIR

log = logging.getLogger("state.watch")


class ChangeWatch(FileSystemEventHandler):
    def __init__(self, store, rescan_seconds=5.0):
        self.store = store
        self.rescan_seconds = rescan_seconds
        self._subscribers = {}          # kind -> [callback]
        self._seen = {}                 # kind -> last (generation, stat key) notified
        self._pending = queue.Queue()
        self._scheduler = schedule.Scheduler()
        self._stop = threading.Event()
        self._observer = None
        self._threads = []

    def subscribe(self, kind, callback):
        self._subscribers.setdefault(kind, []).append(callback)
        self._seen.setdefault(kind, self._key(kind))

    def start(self):
        self._observer = Observer()
        self._observer.schedule(self, os.path.join(self.store.directory, LOCK_DIR),
                                recursive=False)
        self._observer.start()
        self._scheduler.every(self.rescan_seconds).seconds.do(self.rescan)
        for target in (self._dispatch, self._tick):
            t = threading.Thread(target=target, daemon=True, name=f"watch-{target.__name__}")
            t.start()
            self._threads.append(t)
        return self

    def stop(self):
        self._stop.set()
        self._pending.put(None)
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
        for t in self._threads:
            t.join(timeout=2)

    def rescan(self):
        for kind in list(self._subscribers):
            self._pending.put(kind)

    # watchdog callback (observer thread): only queue the kind
    def on_modified(self, event):
        name = os.path.basename(os.fsdecode(event.src_path))
        if name.endswith(".lock"):
            kind = name[:-5]
            if kind in self._subscribers:
                self._pending.put(kind)

    def _key(self, kind):
        coll = self.store.collection(kind)
        return coll.lock.settled_generation(coll.journal.stat_key)

    def _dispatch(self):
        while not self._stop.is_set():
            kind = self._pending.get()
            if kind is None:
                return
            key = self._key(kind)
            if key == self._seen.get(kind):
                continue
            self._seen[kind] = key
            for callback in list(self._subscribers.get(kind, ())):
                try:
                    callback(kind)
                except Exception:
                    log.exception("subscriber of %s failed", kind)

    def _tick(self):
        while not self._stop.wait(0.2):
            self._scheduler.run_pending()
