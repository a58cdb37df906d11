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

Two modes many daemons share, written here once (appliance/backoff.py is the one back-off):
- per-key back-off (`each_key`): a reconcile that works record by record retries a record
  that failed after a delay that doubles up to the cap, without holding back the others,
  and wakes itself when that delay ends; a success resets it.
- a whole pass (`whole_pass = True`): every watched kind leads to one `reconcile_pass()`,
  coalesced, and a pass is skipped when no watched kind moved since the last successful
  one (`world_key`), unless a timer it asked for (its return value) or `pass_due()` says
  it is due.

Stopping when idle (docs/on-demand-daemons.md, "Stopping when idle"): a daemon given
`idle_stop_seconds` (`appliance up` gives it to the on-demand daemons) ends by itself once
it has nothing to do: every watched kind reconciled at its current generation, no retry
or timer due within that many seconds, and either no change for that long (its own
writes are none) or no record of its on-demand kinds that is work for it. It leaves an
idle record (appliance/daemon_state.py) naming the generation of each kind whose write
must start it again, and when a timer of its own is due; whoever started it compares
those generations once the process is gone, so a write that lands while it stops is
never lost.

In the image (systemd, no supervisor to compare), the unit sets APPLIANCE_IDLE_WAKE=marks:
a daemon that may stop first sleeps on the record's kinds (state/wake.py: a writer of
one of them from then on leaves `<state>/.wake/appliance-<name>`, which the daemon's path
unit watches with `PathExists=`), re-reading their generations; one that moved keeps it
running. A timer of its own (wake_at) does not keep it: it also leaves a timed entry
(`<state>/.sleep/.at/appliance-<name>`, its mtime the wake time), which the image's
`appliance-wake` units turn into its mark once the time passed (docs/on-demand-daemons.md,
"In the image").
"""

import logging
import os
import signal
import sys
import threading
import time

import schedule

from appliance import config, daemon_state, logs, metrics
from appliance.backoff import Backoff
from state import ChangeWatch, Store, wake
from state.feed import set_process_actor

# not a store kind: the one name every change of a whole-pass daemon is coalesced under
PASS = "pass"
# idle_wake_at(): the daemon has timed work that no write announces: it must not stop
STAY = "stay"
IDLE_CHECK_SECONDS = 1.0       # how often an idle daemon asks whether it may stop
# the on-demand daemons stop after this long with nothing to do (APPLIANCE_IDLE_STOP_SECONDS;
# 0: never): longer than the daemons' longest retry back-off (60 s), so that a daemon whose
# work keeps failing keeps running; far shorter than the 10 idle minutes of issue 32's goal
IDLE_STOP_SECONDS = 60.0
# APPLIANCE_IDLE_WAKE=marks (the image's units): how a stopped daemon is started again
MARKS = "marks"


def idle_stop_seconds(environ=None):
    """APPLIANCE_IDLE_STOP_SECONDS, else IDLE_STOP_SECONDS; None when 0 (never stop)."""
    raw = (os.environ if environ is None else environ).get("APPLIANCE_IDLE_STOP_SECONDS")
    try:
        seconds = float(raw) if raw not in (None, "") else IDLE_STOP_SECONDS
    except ValueError:
        logging.getLogger("daemons").warning(
            "APPLIANCE_IDLE_STOP_SECONDS=%r is not a number: %.0f s", raw, IDLE_STOP_SECONDS)
        seconds = IDLE_STOP_SECONDS
    return seconds if seconds > 0 else None


def wake_name(name):
    """The daemon's mark in `<state>/.wake/` (and its sleep entries' name): its unit's."""
    return f"appliance-{name}"


class Daemon:
    name = "daemon"
    failed = False          # set by a daemon that stops because it cannot go on
    kinds = ()
    tick_seconds = 60.0
    rescan_seconds = 5.0
    retry_first_seconds = 0.5
    retry_max_seconds = 60.0
    whole_pass = False
    # stop when idle this long (None: never); `appliance up` sets it for on-demand daemons
    idle_stop_seconds = None
    # None: whoever started it compares the generations (`appliance up`); MARKS: it sleeps
    # on its kinds (state/wake.py) and its path unit starts it again (the image)
    idle_wake = None

    def __init__(self, settings=None, store=None):
        self.settings = config.load() if settings is None else settings
        self.store = store if store is not None else Store(self.settings["state_dir"])
        self.store.configure_feed(self.settings.get("feed_keep_entries"),
                                  self.settings.get("feed_keep_seconds"))
        self.log = logging.getLogger(f"daemons.{self.name}")
        # Condition's default lock is reentrant: a tick job requests kinds while the
        # worker already holds it.
        self._wake = threading.Condition()
        self._due = {}           # kind -> monotonic time from which its reconcile may run
        # kind -> the back-off after its reconcile failed; (kind, key) -> a record's
        self._backoff = Backoff(self.retry_first_seconds, self.retry_max_seconds)
        self._world = None       # whole pass: world_key() at the last successful pass
        self._pass_at = None     # whole pass: when the pass asked to run again
        self._stopping = False
        self._scheduler = schedule.Scheduler()
        self._watch = None
        self._worker = None
        self._signalled = False
        self._metrics = None     # made at start(): its series appear once the daemon runs
        # stopping when idle: the generation of each kind at the start of its last
        # successful reconcile, when a watched kind last changed, the idle record once
        # the daemon decided to stop, and has_work() by the generations it was read at
        self._handled = {}
        self._after = {}         # the generation of each kind right after its reconcile
        self._last_change = time.monotonic()
        self._next_idle_check = 0.0
        self.idle_record = None
        self._work_seen = None
        self._kept_for = None    # why it last could not stop (said once, _kept)

    def reconcile(self, kind):
        """Bring the world in line with the records of `kind`. Daemons override this; the
        default only notes the call, which is all a daemon that merely watches does."""
        self.log.debug("%s changed", kind)

    # -- whole pass ----------------------------------------------------------------------

    def reconcile_pass(self):
        """Whole-pass daemons: bring the world in line with every watched kind. May return
        the seconds after which the next pass is due even if nothing moves (None: no
        timer)."""

    def world_key(self):
        """What a pass depends on: the version of every watched kind. A pass whose key is
        the last successful pass's (and no timer is due) is skipped."""
        return tuple(self.store.collection(k).snapshot().key for k in self.kinds)

    def pass_due(self):
        """Whole-pass daemons: True when a pass must run although nothing moved (a clock
        of the daemon's own)."""
        return False

    def _run_pass(self):
        world = self.world_key()
        timer = self._pass_at is not None and time.monotonic() >= self._pass_at
        if world == self._world and not timer and not self.pass_due():
            return
        self._world = None       # a pass that raises is run again after its back-off
        wait = self.reconcile_pass()
        self._pass_at = None if wait is None else time.monotonic() + wait
        if wait is not None:
            self.request_in(PASS, wait)
        # taken before the pass: what the pass itself wrote wakes it once more, and that
        # pass finds nothing to do
        self._world = world

    # -- per-key back-off ----------------------------------------------------------------

    def each_key(self, kind, records, work, key=lambda record: record["uuid"]):
        """`work(record)` for each record whose back-off allows. One that raises is logged,
        waits (doubling up to the cap) and asks for a reconcile of `kind` when the wait
        ends; one that succeeds is reset. Returns the records that failed this time."""
        failed = []
        for record in records:
            k = (kind, key(record))
            if not self._backoff.ready(k):
                continue
            try:
                work(record)
            except Exception:
                delay = self._backoff.failed(k)
                if self._metrics is not None:
                    self._metrics.error(kind)
                self.log.exception("%s %s failed; retrying in %.1f s", kind, k[1], delay)
                self.request_in(kind, delay)
                failed.append(record)
            else:
                self._backoff.succeeded(k)
        return failed

    def schedule_jobs(self, scheduler):
        """Add timed jobs of the daemon's own to `scheduler` (a `schedule.Scheduler`);
        they run on the worker thread, between reconciles, and must not raise."""

    # -- lifecycle ---------------------------------------------------------------------

    def start(self):
        if self.idle_wake == MARKS:
            # before the first look at any generation: a write that left the mark is seen
            # by that look (state/wake.py)
            wake.forget(self.store.directory, wake_name(self.name))
        # the back-off's waits as set on the instance (a test shortens them)
        self._backoff.first, self._backoff.cap = self.retry_first_seconds, \
            self.retry_max_seconds
        self._metrics = metrics.DaemonMetrics(
            self.name, (PASS,) if self.whole_pass else self.kinds)
        self._watch = ChangeWatch(self.store, self.rescan_seconds)
        for kind in self.kinds:
            self._watch.subscribe(kind, self._changed)
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
        """Run until SIGTERM or SIGINT, or until idle (idle_record), then stop cleanly."""
        # The handler only sets a flag: taking any lock inside a signal handler could
        # deadlock against the main thread holding it, so the main thread polls instead.
        def on_signal(signum, frame):
            self._signalled = True
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        self.log.info("started; watching %s", ", ".join(self.kinds) or "nothing")
        while not self._signalled and self.idle_record is None:
            time.sleep(0.1)
        self.log.info("stopping%s", "" if self.idle_record is None else ": idle")
        self.stop()

    # -- requests (any thread) ---------------------------------------------------------

    def _changed(self, kind):
        """A watched kind was written (the change watch's callback). The echo of a write
        made while the daemon reconciled (its own, mostly) does not count as activity for
        the idle stop; it is reconciled all the same."""
        if self.store.collection(kind).lock.state()[0] != self._after.get(kind):
            self._last_change = time.monotonic()
        self.request(kind)

    def request(self, kind):
        """Ask for a reconcile of `kind`, as soon as its back-off allows: a change brings
        forward a reconcile scheduled later (request_in), never one inside a back-off."""
        if self.whole_pass:
            kind = PASS
        with self._wake:
            earliest = self._backoff.until(kind)
            self._due[kind] = min(self._due.get(kind, earliest), earliest) \
                if earliest else 0.0
            self._count_waiting()
            self._wake.notify_all()

    def request_in(self, kind, seconds):
        """Ask for a reconcile of `kind` after `seconds` (a per-record retry), unless one
        is due sooner anyway."""
        if self.whole_pass:
            kind = PASS
        with self._wake:
            when = time.monotonic() + seconds
            self._due[kind] = min(self._due.get(kind, when), when)
            self._count_waiting()
            self._wake.notify_all()

    def request_all(self):
        for kind in self.kinds:
            self.request(kind)

    def _count_waiting(self):
        """(wake lock held) The waiting-items gauge, once the daemon runs."""
        if self._metrics is not None:
            self._metrics.waiting.set(len(self._due))

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
                    self._count_waiting()
                    return kind
                if self.idle_stop_seconds is not None and now >= self._next_idle_check:
                    self._next_idle_check = now + IDLE_CHECK_SECONDS
                    record = self._idle_record(now)
                    if record is not None and (self.idle_wake != MARKS
                                               or self._sleep(record)):
                        self.idle_record = record
                        return None
                waits = [due - now for due in self._due.values()]
                idle = self._scheduler.idle_seconds
                if idle is not None:
                    waits.append(idle)
                self._wake.wait(min([1.0] + [max(w, 0.01) for w in waits]))
            return None

    def _reconcile_guarded(self, kind):
        started = time.perf_counter()
        try:
            # taken before the reconcile reads: what it handled is at least this
            seen = self._generations(self.kinds if kind == PASS else
                                     [kind] if kind in self.kinds else [])
            if kind == PASS and self.whole_pass:
                self._run_pass()
            else:
                self.reconcile(kind)
        except Exception:
            self._measured(kind, started, ok=False)
            with self._wake:
                delay = self._backoff.failed(kind)
                self._due[kind] = max(self._due.get(kind, 0.0), self._backoff.until(kind))
                self._count_waiting()
            self.log.exception("reconcile of %s failed; retrying in %.1f s", kind, delay)
        else:
            self._measured(kind, started, ok=True)
            with self._wake:
                self._backoff.succeeded(kind)
                self._handled.update(seen)
                self._after.update(self._generations(seen))

    # -- stopping when idle ------------------------------------------------------------

    def has_work(self):
        """Whether a record of the daemon's on-demand kinds is work for it (daemons.IS_WORK;
        by default any record is). A daemon with no on-demand kinds always has work."""
        from daemons import IS_WORK, ON_DEMAND  # noqa: PLC0415 (reads the descriptors)
        kinds = ON_DEMAND.get(self.name)
        if not kinds:
            return True
        gens = self._generations(kinds)
        if self._work_seen is not None and self._work_seen[0] == gens:
            return self._work_seen[1]
        is_work = (lambda record: True)
        if self.name in IS_WORK:
            from appliance.capability import load  # noqa: PLC0415
            is_work = load(IS_WORK[self.name])
        work = any(is_work(record) for kind in kinds
                   for record in self.store.collection(kind).records())
        self._work_seen = (gens, work)
        return work

    def wake_kinds(self, work):
        """The kinds whose next write must start the daemon again once it stopped: every
        watched kind while it has work, else only its on-demand kinds (a write to the
        others changes nothing for it while they hold no work, docs/on-demand-daemons.md)."""
        from daemons import ON_DEMAND  # noqa: PLC0415
        return tuple(self.kinds) if work else tuple(ON_DEMAND.get(self.name, self.kinds))

    def idle_wake_at(self):
        """Timed work of the daemon's own that no write announces: None (none), the Unix
        time at which it must run again, or STAY (it must keep running). The retries and
        timers it asked for (request_in) are counted apart."""
        return None

    def started_by_its_timer(self, record):
        """(MARKS, before start) Whether this start is its timer's: `record`, the daemon
        state its last instance left (daemon_state.read_record), is this boot's idle record
        with a wake time now passed, and no kind whose write starts it moved since. Then
        its work done, it stops at once rather than after idle_stop_seconds: no write
        brought it, so none is expected (the builder's timed retry of a failing repository
        kept it, 60 MB, up a minute per retry: docs/on-demand-daemons.md)."""
        idle = record.get("idle") if daemon_state.idle_this_boot(record) else None
        if not idle or not isinstance(idle.get("wake_at"), (int, float)) \
                or idle["wake_at"] > time.time() + 1 or not isinstance(idle.get("kinds"), dict):
            return False
        kinds = idle["kinds"]
        if not set(kinds) <= set(self.kinds) or self._generations(kinds) != kinds:
            return False
        self._last_change = float("-inf")
        return True

    def _generations(self, kinds):
        return {kind: self.store.collection(kind).lock.state()[0] for kind in kinds}

    def _idle_record(self, now):
        """(wake lock held, nothing ready) The idle record when the daemon may stop now,
        else None: see the module docstring."""
        if any(due - now < self.idle_stop_seconds for due in self._due.values()):
            return self._kept("due", "a retry or timer of its own is due within the idle "
                                     "time")
        current = self._generations(self.kinds)
        behind = [kind for kind, gen in current.items() if self._handled.get(kind) != gen]
        if behind:
            # written after its last reconcile: its change event may still be on its way
            for kind in behind:
                self.request(kind)
            return None
        work = self.has_work()
        if work and now - self._last_change < self.idle_stop_seconds:
            return None
        wake_at = self.idle_wake_at()
        if wake_at == STAY:
            return self._kept("stay", "it has timed work that no write announces "
                                      "(idle_wake_at)")
        timers = [time.time() + (due - now) for due in self._due.values()]
        if timers:
            wake_at = min(timers + ([wake_at] if wake_at is not None else []))
        if (wake_at is not None and self.idle_wake == MARKS
                and wake_at - time.time() < self.idle_stop_seconds):
            # woken that soon by its timed entry, it would pay a Python start for nothing
            # (a fork under `appliance up`, where it stops)
            return self._kept("soon", "its own timer is due within the idle time")
        self._kept_for = None
        return {"kinds": {kind: current[kind] for kind in self.wake_kinds(work)},
                "wake_at": wake_at, "work": work}

    def _kept(self, why, text):
        """Idle, but it may not stop: said once per reason `why` until it stops (its log is
        where one reads why an on-demand daemon still runs, tests/bench/bench_boot.py)."""
        if why != self._kept_for:
            self._kept_for = why
            self.log.info("idle, kept running: %s", text)
        return None

    def _sleep(self, record):
        """(wake lock held) MARKS: sleep on the record's kinds; False when one moved since
        (it is requested, and the daemon goes on)."""
        kinds, wake_at = record["kinds"], record["wake_at"]
        if wake.sleep(self.store.directory, wake_name(self.name), list(kinds), kinds,
                      lambda kind: self.store.collection(kind).lock.settled_generation()[0],
                      wake_at=wake_at):
            if wake_at is not None:
                # where one reads when a sleeping daemon runs again (tests/bench/bench_boot.py)
                self.log.info("asleep on its kinds; its timer wakes it at %s (in %.0f s)",
                              time.strftime("%H:%M:%S %Z", time.localtime(wake_at)),
                              wake_at - time.time())
            return True
        for kind, generation in kinds.items():
            if self.store.collection(kind).lock.state()[0] != generation:
                self.request(kind)
        return False

    def _measured(self, kind, started, ok):
        if self._metrics is not None:
            self._metrics.passed(kind, time.perf_counter() - started, ok)


def run(daemon_cls):
    """Entry point of `python -m daemons.<name>`: settings from the environment, logging,
    run until signalled. Returns the process exit code."""
    try:
        settings = config.load()
    except config.ConfigError as e:
        print(f"{daemon_cls.name}: {e}", file=sys.stderr)
        return 2
    logs.setup(daemon_cls.name, str(settings["log_level"]).upper())
    # before the daemon makes any metric: its values go to the files the API reads
    metrics.enable(settings["state_dir"])
    set_process_actor(daemon_cls.name)     # its writes' actor in the change feed
    # what the last instance left: read before this start replaces it
    last = daemon_state.read_record(settings["state_dir"], daemon_cls.name) or {}
    daemon_state.record_started(settings["state_dir"], daemon_cls.name)
    try:
        daemon = daemon_cls(settings)
        if os.environ.get("APPLIANCE_IDLE_WAKE") == MARKS:
            # the image's units: stop when idle, started again by the path unit
            daemon.idle_wake = MARKS
            daemon.idle_stop_seconds = idle_stop_seconds()
            if daemon.idle_stop_seconds is not None and daemon.started_by_its_timer(last):
                daemon.log.info("started by its timer: it stops once its work is done")
        daemon.run_forever()
    finally:
        metrics.process_dead(os.getpid())
    # a daemon that stopped because it could not go on (failed) exits 1: restarted
    if daemon.failed:
        return 1
    if daemon.idle_record is not None:
        # what its supervisor reads once the process is gone (appliance/supervisor.py)
        daemon_state.record_idle(settings["state_dir"], daemon_cls.name, daemon.idle_record)
        return 0
    daemon_state.record_ended(settings["state_dir"], daemon_cls.name, "stopped", clean=True)
    return 0
