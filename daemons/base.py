"""The process shell every daemon runs in.

A daemon names the kinds it watches and implements `reconcile(kind)`. The shell calls it
- once per kind at start, to converge whatever changed while the daemon was down;
- within milliseconds of a write to the kind (through state.ChangeWatch);
- on every periodic tick, so that a lost event or an outside change is caught late, not never.
So reconcile is level-triggered: it is told which kind to look at, not what changed, and
must be idempotent.

Reconciles run one at a time on one worker thread. One that raises is logged and retried
after a back-off that doubles up to a cap (a change to the kind does not cut the wait short,
so a failing reconcile can never spin); a success resets it. The main thread only waits
for SIGTERM/SIGINT.
"""

import logging
import signal
import sys
import threading
import time

import schedule

from appliance import config, logs
from state import ChangeWatch, Store


class Daemon:
    name = "daemon"
    failed = False          # set by a daemon that stops because it cannot go on
    kinds = ()
    tick_seconds = 60.0
    rescan_seconds = 5.0
    retry_first_seconds = 0.5
    retry_max_seconds = 60.0

    def __init__(self, settings=None, store=None):
        self.settings = config.load() if settings is None else settings
        self.store = store if store is not None else Store(self.settings["state_dir"])
        self.log = logging.getLogger(f"daemons.{self.name}")
        # Condition's default lock is reentrant: a tick job requests kinds while the
        # worker already holds it.
        self._wake = threading.Condition()
        self._due = {}           # kind -> monotonic time from which its reconcile may run
        self._retry_at = {}      # kind -> end of the back-off after its last failure
        self._retry_delay = {}   # kind -> length of that back-off
        self._stopping = False
        self._scheduler = schedule.Scheduler()
        self._watch = None
        self._worker = None
        self._signalled = False

    def reconcile(self, kind):
        """Bring the world in line with the records of `kind`. Daemons override this; the
        default only notes the call, which is all a daemon that merely watches does."""
        self.log.debug("%s changed", kind)

    def schedule_jobs(self, scheduler):
        """Add timed jobs of the daemon's own to `scheduler` (a `schedule.Scheduler`);
        they run on the worker thread, between reconciles, and must not raise."""

    # -- lifecycle ---------------------------------------------------------------------

    def start(self):
        self._watch = ChangeWatch(self.store, self.rescan_seconds)
        for kind in self.kinds:
            self._watch.subscribe(kind, self.request)
        self._watch.start()
        self._scheduler.every(self.tick_seconds).seconds.do(self.request_all)
        self.schedule_jobs(self._scheduler)
        self.request_all()
        self._worker = threading.Thread(target=self._work, daemon=True,
                                        name=f"{self.name}-reconcile")
        self._worker.start()
        return self

    def stop(self, timeout=1.0):
        """Stop watching and reconciling. A reconcile still running after `timeout` is
        abandoned (its thread is a daemon thread): store writes are atomic, so leaving
        one half-way loses work but never corrupts state."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._worker is not None:
            self._worker.join(timeout)
            if self._worker.is_alive():
                self.log.warning("a reconcile is still running; leaving it")
        if self._watch is not None:
            self._watch.stop()

    def run_forever(self):
        """Run until SIGTERM or SIGINT, then stop cleanly."""
        # The handler only sets a flag: taking any lock inside a signal handler could
        # deadlock against the main thread holding it, so the main thread polls instead.
        def on_signal(signum, frame):
            self._signalled = True
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        self.log.info("started; watching %s", ", ".join(self.kinds) or "nothing")
        while not self._signalled:
            time.sleep(0.1)
        self.log.info("stopping")
        self.stop()

    # -- requests (any thread) ---------------------------------------------------------

    def request(self, kind):
        """Ask for a reconcile of `kind`, as soon as its back-off allows: a change brings
        forward a reconcile scheduled later (request_in), never one inside a back-off."""
        with self._wake:
            earliest = self._retry_at.get(kind, 0.0)
            self._due[kind] = min(self._due.get(kind, earliest), earliest) \
                if earliest else 0.0
            self._wake.notify_all()

    def request_in(self, kind, seconds):
        """Ask for a reconcile of `kind` after `seconds` (a per-record retry), unless one
        is due sooner anyway."""
        with self._wake:
            when = time.monotonic() + seconds
            self._due[kind] = min(self._due.get(kind, when), when)
            self._wake.notify_all()

    def request_all(self):
        for kind in self.kinds:
            self.request(kind)

    # -- worker thread -----------------------------------------------------------------

    def _work(self):
        while True:
            kind = self._next_due_kind()
            if kind is None:
                return
            self._reconcile_guarded(kind)

    def _next_due_kind(self):
        """Wait until some kind is due and take it; None once stopping."""
        with self._wake:
            while not self._stopping:
                self._scheduler.run_pending()
                now = time.monotonic()
                ready = [(due, kind) for kind, due in self._due.items() if due <= now]
                if ready:
                    kind = min(ready)[1]
                    del self._due[kind]
                    return kind
                waits = [due - now for due in self._due.values()]
                idle = self._scheduler.idle_seconds
                if idle is not None:
                    waits.append(idle)
                self._wake.wait(min([1.0] + [max(w, 0.01) for w in waits]))
            return None

    def _reconcile_guarded(self, kind):
        try:
            self.reconcile(kind)
        except Exception:
            with self._wake:
                previous = self._retry_delay.get(kind)
                delay = (self.retry_first_seconds if previous is None
                         else min(previous * 2, self.retry_max_seconds))
                self._retry_delay[kind] = delay
                self._retry_at[kind] = time.monotonic() + delay
                self._due[kind] = max(self._due.get(kind, 0.0), self._retry_at[kind])
            self.log.exception("reconcile of %s failed; retrying in %.1f s", kind, delay)
        else:
            with self._wake:
                self._retry_delay.pop(kind, None)
                self._retry_at.pop(kind, None)


def run(daemon_cls):
    """Entry point of `python -m daemons.<name>`: settings from the environment, logging,
    run until signalled. Returns the process exit code."""
    try:
        settings = config.load()
    except config.ConfigError as e:
        print(f"{daemon_cls.name}: {e}", file=sys.stderr)
        return 2
    logs.setup(daemon_cls.name, str(settings["log_level"]).upper())
    daemon = daemon_cls(settings)
    daemon.run_forever()
    # a daemon that stopped because it could not go on (failed) exits 1: restarted
    return 1 if daemon.failed else 0
