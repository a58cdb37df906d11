"""The appliance's metrics: every process's numbers, served as one Prometheus text.

The API and each daemon are processes of their own (docs/supervisor.md), and a scrape
reaches only the API. So every process keeps its counters, gauges and histograms in
prometheus_client's multiprocess mode: one small memory-mapped file per process and type
under `<state>/run/metrics` (PROMETHEUS_MULTIPROC_DIR), which GET /metrics in the API
merges. A metric is a plain prometheus_client object, defined in any module of any
process: nothing registers anywhere special (docs/metrics.md).

prometheus_client decides once, when a value is made, whether it goes to a file: the
variable must be in the environment before the first metric exists. `appliance up` sets it
before it imports anything it forks (`prepare`), so every child inherits it; a process
started alone (a systemd unit, a test) sets it at its start (`enable`).

prometheus_client's package `__init__` imports its HTTP exposition too (http.server,
urllib, ssl: about 10 MB of resident memory, measured here), which a daemon that only
writes values never uses: `client()` loads the metric types without it, and completes the
package the moment anything asks it for a name it lacks (`from prometheus_client import
Gauge` works as ever, at the full price).

What is read at scrape time rather than counted (the resources by kind and status) is
computed in the API from the store's in-memory collections: nothing is counted on the
write path for it.
"""

import bisect
import contextlib
import glob
import importlib
import importlib.util
import ipaddress
import logging
import os
import re
import shutil
import sys
import threading
import time
import weakref

from appliance.processes import alive

ENV = "PROMETHEUS_MULTIPROC_DIR"
PATH = "/metrics"
PERMISSION = "appliance.metrics.read"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# methods outside this set are counted as "other": a label value must never be whatever
# a client sends (each one would be a new series)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"      # the route label of a path no route matches
# the store's writes take well under a millisecond to tens of milliseconds (fdatasync)
STORE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0, 2.5)
# a daemon's pass: milliseconds (nothing to do) to minutes (a VM's creation)
PASS_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                300.0)
_LIVE_FILE = re.compile(r"^gauge_live\w+?_(\d+)\.db$")

log = logging.getLogger("appliance.metrics")


def directory(state_dir):
    """Where every process of this state directory keeps its metric files."""
    return os.path.join(state_dir, "run", "metrics")


# ---- the library ---------------------------------------------------------------------------

_client_lock = threading.RLock()
# this process's id, kept here: a value in a file asks for it at each change, to notice a
# fork (prometheus_client's default is os.getpid, a syscall: five per API request)
_pid = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _pid.__setitem__(0, os.getpid()))


def current_pid():
    return _pid[0]


def _file_values(values):
    """prometheus_client's class of values kept in files, asking current_pid()."""
    return values.MultiProcessValue(process_identifier=current_pid)


def client():
    """The prometheus_client package, with its metric types, values and multiprocess
    files loaded; the rest of its `__init__` only once some name of it is asked for."""
    with _client_lock:
        package = sys.modules.get("prometheus_client")
        if package is None:
            spec = importlib.util.find_spec("prometheus_client")
            package = importlib.util.module_from_spec(spec)
            package.__getattr__ = _completer(package, spec)
            sys.modules["prometheus_client"] = package
        fresh = "prometheus_client.values" not in sys.modules
        for name in ("values", "metrics", "multiprocess"):
            importlib.import_module(f"prometheus_client.{name}")
        values = sys.modules["prometheus_client.values"]
        # only before any value exists: each class keeps its own open files
        if fresh and getattr(values.ValueClass, "_multiprocess", False):
            values.ValueClass = _file_values(values)
    return package


def _completer(package, spec):
    """The package's module __getattr__ (PEP 562) while its __init__ has not run: run it
    once, then answer from it."""
    done = []

    def __getattr__(name):
        with _client_lock:
            if done:
                raise AttributeError(f"module 'prometheus_client' has no attribute {name!r}")
            done.append(True)
            spec.loader.exec_module(package)
        return getattr(package, name)
    return __getattr__


# the metric types, for modules of a daemon that must stay lean: `from appliance.metrics
# import Counter` is prometheus_client's own Counter, loaded without the exposition
METRIC_TYPES = ("Counter", "Gauge", "Histogram", "Summary", "Info", "Enum")


def __getattr__(name):
    if name in METRIC_TYPES:
        client()
        return getattr(sys.modules["prometheus_client.metrics"], name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def full_client():
    """The whole package, exposition included (the API, at a scrape)."""
    package = client()
    package.REGISTRY            # noqa: B018 (completes the package: see _completer)
    return package


# ---- processes ---------------------------------------------------------------------------

def clear(state_dir):
    """Remove an earlier run's metric files (its values would be added to this run's):
    first boot, at every boot, before any process of the appliance makes a metric."""
    shutil.rmtree(directory(state_dir), ignore_errors=True)


def prepare(state_dir):
    """`appliance up`, before it imports what it forks: an empty directory for this run,
    named in the environment that its children inherit."""
    clear(state_dir)
    path = directory(state_dir)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.environ[ENV] = path
    return path


def enable(state_dir):
    """A process (the API, a daemon) at its start: its metrics go to the shared directory
    (the inherited one, or this state's), the store's writes are timed, and the files of
    processes that died without saying so stop counting as live. Returns the directory,
    or None when it cannot be used (the metrics then stay in this process: logged, never
    fatal)."""
    path = os.environ.get(ENV) or directory(state_dir)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError("not writable by this process's user")
    except OSError as e:
        log.warning("metrics stay in this process: cannot use %s: %s", path, e)
        os.environ.pop(ENV, None)
        return None
    os.environ[ENV] = path
    client()
    values = sys.modules["prometheus_client.values"]
    if not getattr(values.ValueClass, "_multiprocess", False):
        # imported before the variable was set (a unit or test starting one process):
        # the values made from now on go to the files; one made earlier stays local
        values.ValueClass = _file_values(values)
    sweep(path)
    import state  # noqa: PLC0415
    state.observe_writes(_observe_store_write)
    return path


def process_dead(pid):
    """A process of this run ended: its live gauges (in-flight requests, waiting items)
    stop counting; its counters and histograms stay in the totals."""
    path = os.environ.get(ENV)
    if path and os.path.isdir(path):
        client()
        try:
            sys.modules["prometheus_client.multiprocess"].mark_process_dead(pid, path)
        except OSError as e:     # removed meanwhile by the other who saw it die
            log.debug("live metrics of %s: %s", pid, e)


def sweep(path):
    """The live gauges of processes that no longer exist (killed, or started alone with
    nobody to report their end)."""
    for name in os.listdir(path):
        match = _LIVE_FILE.match(name)
        if match and not alive(int(match.group(1))):
            process_dead(int(match.group(1)))


# ---- the families --------------------------------------------------------------------------

class _Families:
    """The families of the API, the daemons and the store, made at first use (so that
    prometheus_client is imported, and the values made, only after `enable`)."""

    def __init__(self):
        client()
        from prometheus_client.metrics import Counter, Gauge, Histogram  # noqa: PLC0415
        self.api_requests = Counter(
            "appliance_api_requests", "API requests answered, by route template, method "
            "and status", ["route", "method", "status"])
        self.api_duration = Histogram(
            "appliance_api_request_duration_seconds", "Time from a request's arrival to "
            "its answer, by route template and method", ["route", "method"])
        self.api_in_flight = Gauge(
            "appliance_api_requests_in_flight", "API requests being served now",
            multiprocess_mode="livesum")
        self.api_long_lived = Gauge(
            "appliance_api_long_lived_connections", "Connections held open by the API "
            "(agent long polls, event streams), by what holds them", ["kind"],
            multiprocess_mode="livesum")
        self.daemon_pass = Histogram(
            "appliance_daemon_pass_duration_seconds", "Duration of a daemon's reconcile "
            "of a kind (or of its whole pass)", ["daemon", "kind"], buckets=PASS_BUCKETS)
        self.daemon_waiting = Gauge(
            "appliance_daemon_waiting_items", "Kinds (or passes) a daemon has been asked to "
            "reconcile and has not yet started", ["daemon"], multiprocess_mode="livesum")
        self.daemon_errors = Counter(
            "appliance_daemon_errors", "Reconciles (or records of one) that raised",
            ["daemon", "kind"])
        self.daemon_success = Gauge(
            "appliance_daemon_last_success_timestamp_seconds", "When a daemon's reconcile "
            "of a kind last succeeded (Unix time)", ["daemon", "kind"],
            multiprocess_mode="max")
        self.store_write = Histogram(
            "appliance_store_write_seconds", "A store write from its call to its return "
            "(lock, append, fdatasync), by kind", ["kind"], buckets=STORE_BUCKETS)
        self.store_fsync = Histogram(
            "appliance_store_fsync_seconds", "The fdatasync of a store write, by kind",
            ["kind"], buckets=STORE_BUCKETS)


_families = None
_families_lock = threading.Lock()


def families():
    global _families
    if _families is None:
        with _families_lock:
            if _families is None:
                _families = _Families()
    return _families


def _observe_store_write(kind, seconds, fsync_seconds):
    # the write is on disk already: a metric that fails must not make it look failed
    try:
        f = families()
        f.store_write.labels(kind).observe(seconds)
        f.store_fsync.labels(kind).observe(fsync_seconds)
    except Exception:
        log.exception("cannot record a store write's time")


def declare_long_lived(kind):
    """A kind of long-lived connection the API holds (its series at 0 until one opens)."""
    families().api_long_lived.labels(kind)


@contextlib.contextmanager
def long_lived(kind):
    """Around the wait of a connection the API holds open (`kind`: "agent_long_poll")."""
    gauge = families().api_long_lived.labels(kind)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


class DaemonMetrics:
    """One daemon's families, with their series made at start (a series that never moved
    is still there, at 0)."""

    def __init__(self, daemon, kinds):
        f = families()
        self.daemon = daemon
        self.waiting = f.daemon_waiting.labels(daemon)
        self._pass = f.daemon_pass
        self._errors = f.daemon_errors
        self._success = f.daemon_success
        for kind in kinds:
            self._errors.labels(daemon, kind)

    def passed(self, kind, seconds, ok):
        self._pass.labels(self.daemon, kind).observe(seconds)
        if ok:
            self._success.labels(self.daemon, kind).set(time.time())
        else:
            self.error(kind)

    def error(self, kind):
        self._errors.labels(self.daemon, kind).inc()


# ---- the API -------------------------------------------------------------------------------

def is_local_direct(environ):
    """A request from this machine that came straight to the API's socket: its address is
    loopback and no proxy forwarded it. The image's nginx (appliance/firstboot/nginx.py)
    always sets X-Forwarded-For, which the API's Waitress keeps from its trusted proxy
    (127.0.0.1) and drops from anyone else; so a client through nginx, even one on this
    machine, is never "local direct", and one that forges the header only loses."""
    if "HTTP_X_FORWARDED_FOR" in environ or "HTTP_FORWARDED" in environ:
        return False
    try:
        return ipaddress.ip_address(environ.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


class _RequestTally:
    """The API's request counter, duration histogram and in-flight gauge, counted by each
    request thread in its own plain numbers and added to prometheus_client's values (the
    files) by flush(): before every exposition, at the API's exit, and by the first
    request a second after the last flush. A value in a file costs a lock, a pid check
    and a write of the mapping per change: five per request (issue 32). Each thread's
    numbers have one writer, their own thread; flush() only reads them and adds what
    moved since it last looked, so nothing is lost nor counted twice."""

    def __init__(self, requests, duration, in_flight, every=1.0):
        self.requests, self.duration, self.in_flight = requests, duration, in_flight
        self.bounds = tuple(duration._upper_bounds)     # the histogram's, +Inf last
        self.every = every
        self.due = time.monotonic() + every
        self._local = threading.local()
        self._threads = []           # every thread's _ThreadTally
        self._lock = threading.Lock()
        # (route, method, status) -> (counter child, histogram child): labels() takes a
        # lock and checks its values each time; the keys are bounded
        self._children = {}

    def mine(self):
        try:
            return self._local.tally
        except AttributeError:
            tally = self._local.tally = _ThreadTally(len(self.bounds))
            with self._lock:
                self._threads.append(tally)
            return tally

    def flush(self, wait=True):
        """wait=False (a request thread's periodic flush): not if another is flushing."""
        if not self._lock.acquire(wait):
            return
        try:
            self.due = time.monotonic() + self.every
            in_flight = 0
            for tally in self._threads:
                in_flight += tally.started - tally.finished
                for key, series in list(tally.series.items()):
                    self._add(key, series)
            self.in_flight.set(in_flight)
        finally:
            self._lock.release()

    def _add(self, key, series):
        count, seconds, buckets = series.count, series.seconds, list(series.buckets)
        done = series.flushed
        if count == done[0]:
            return
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (self.requests.labels(*key),
                                              self.duration.labels(*key[:2]))
        counter, histogram = children
        counter.inc(count - done[0])
        histogram._sum.inc(seconds - done[1])
        for i, (now, before) in enumerate(zip(buckets, done[2])):
            if now != before:
                histogram._buckets[i].inc(now - before)
        series.flushed = (count, seconds, buckets)


class _ThreadTally:
    __slots__ = ("started", "finished", "series", "size")

    def __init__(self, size):
        self.started = self.finished = 0
        self.series = {}             # (route, method, status) -> _Series
        self.size = size

    def count(self, key, seconds, bucket):
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = _Series(self.size)
        series.seconds += seconds
        series.buckets[bucket] += 1
        series.count += 1            # last: flush() takes a count as its cue


class _Series:
    __slots__ = ("count", "seconds", "buckets", "flushed")

    def __init__(self, size):
        self.count, self.seconds, self.buckets = 0, 0.0, [0] * size
        self.flushed = (0, 0.0, [0] * size)


# every instrumented app's tally, while its app lives (tests make many in one process)
_tallies = weakref.WeakSet()


def flush():
    """Add what the request threads counted to the files (appliance/server.py at exit;
    exposition() itself)."""
    for tally in list(_tallies):
        tally.flush()


def instrument(app, store):
    """The WSGI app `app` (the API's Bottle app, over `store`) with its requests counted
    and timed, and GET /metrics answered without a token to a local direct caller (a
    local Prometheus). Anyone else's GET /metrics goes to the route, which needs the
    permission."""
    f = families()
    tally = _RequestTally(f.api_requests, f.api_duration, f.api_in_flight)
    _tallies.add(tally)
    bounds = tally.bounds

    def counted(thread, template, method, status, seconds):
        thread.count((template, method, status), seconds, bisect.bisect_left(bounds, seconds))
        if time.monotonic() >= tally.due:
            tally.flush(wait=False)

    def instrumented(environ, start_response):
        method = environ.get("REQUEST_METHOD", "")
        started = time.perf_counter()
        thread = tally.mine()
        if environ.get("PATH_INFO") == PATH and method == "GET" \
                and "HTTP_AUTHORIZATION" not in environ and is_local_direct(environ):
            answer = _answer_local(environ, start_response)
            counted(thread, PATH, method, "200", time.perf_counter() - started)
            return answer
        status = []

        def recording(line, headers, exc_info=None):
            status[:] = [line[:3]]
            return start_response(line, headers, exc_info)

        thread.started += 1
        try:
            return app(environ, recording)
        finally:
            thread.finished += 1
            route = environ.get("bottle.route")
            template = route.rule if route is not None else UNMATCHED
            counted(thread, template, method if method in METHODS else "other",
                    status[0] if status else "500", time.perf_counter() - started)

    def _answer_local(environ, start_response):
        body = exposition(store)
        start_response("200 OK", [("Content-Type", CONTENT_TYPE),
                                  ("Content-Length", str(len(body)))])
        return [body]

    return instrumented


def register(api):
    """GET /metrics on the API: for platform callers with the permission."""
    from appliance.api.errors import Forbidden  # noqa: PLC0415
    from appliance.api.routing import Reply  # noqa: PLC0415
    from appliance.tenancy import is_platform  # noqa: PLC0415

    def read(call):
        # the numbers are the whole appliance's (every project's resources): never a
        # project's, whatever role it was given
        if not is_platform(call.principal):
            raise Forbidden("metrics are the whole appliance's: use an admin's token "
                            "(unscoped or scoped to the admin project)")
        return Reply(exposition(call.store), 200, {"Content-Type": CONTENT_TYPE})

    api.route("GET", PATH, read, permission=PERMISSION, tag="system",
              summary="Metrics of the API, the daemons, the store and the resources "
                      "(Prometheus text format)")


# ---- the scrape ----------------------------------------------------------------------------

def exposition(store):
    """The Prometheus text of every process's metrics and of the store's resources."""
    flush()
    full_client()
    from prometheus_client.exposition import generate_latest  # noqa: PLC0415
    from prometheus_client.registry import CollectorRegistry  # noqa: PLC0415
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Everything(store))
    return generate_latest(registry)


class _Everything:
    """The files of every process (this one's included), then what only this process
    has (metrics computed at collection, prometheus_client's process_* and python_*,
    which describe the API process), then the resources. A family is given once: the
    files' sum wins over this process's own share."""

    def __init__(self, store):
        self.store = store

    def collect(self):
        from prometheus_client.registry import REGISTRY  # noqa: PLC0415
        seen = set()
        path = os.environ.get(ENV)
        if path and os.path.isdir(path):
            for family in merged_files(path):
                seen.add(family.name)
                yield family
        for family in REGISTRY.collect():
            if family.name not in seen:
                seen.add(family.name)
                yield family
        yield resource_counts(self.store)


def merged_files(path, attempts=3):
    """The families of every process's files under `path`, summed."""
    import struct  # noqa: PLC0415
    from prometheus_client.multiprocess import MultiProcessCollector  # noqa: PLC0415
    for attempt in range(attempts):
        # a file of another user's process (the node agent runs as root) is left out
        # rather than failing the scrape; so is one its process has created but not yet
        # sized (0 bytes: prometheus_client's reader fails on it)
        files = [f for f in glob.glob(os.path.join(path, "*.db"))
                 if os.access(f, os.R_OK) and _sized(f)]
        try:
            return list(MultiProcessCollector.merge(files, accumulate=True))
        except (FileNotFoundError, struct.error):
            # a dead process's live file removed between the listing and the read, or a
            # file being created read in the moment before its header was written
            if attempt == attempts - 1:
                raise
    return []


def _sized(path):
    try:
        return os.path.getsize(path) >= 8
    except OSError:
        return False


def resource_counts(store):
    """appliance_resources{kind, status, project}: each kind's records counted from the
    API's in-memory copy of the store (no file is read for a kind that did not move)."""
    from prometheus_client.metrics_core import GaugeMetricFamily  # noqa: PLC0415
    family = GaugeMetricFamily("appliance_resources", "Records in the store, by kind, "
                               "status and project", labels=["kind", "status", "project"])
    for kind in store.kinds():
        counts = {}
        for record in store.collection(kind).snapshot().ordered():
            key = (str(record.get("status") or ""), str(record.get("project_id") or ""))
            counts[key] = counts.get(key, 0) + 1
        for (status, project), count in sorted(counts.items()):
            family.add_metric([kind, status, project], count)
    return family


def last_successes(state_dir):
    """{daemon: (Unix time, kind)} of each daemon's last successful reconcile, from
    every process's files (GET /v1/system/daemons); {} when there are none."""
    path = os.environ.get(ENV) or directory(state_dir)
    if not (path and os.path.isdir(path)):
        return {}
    full_client()
    out = {}
    for family in merged_files(path):
        if family.name != "appliance_daemon_last_success_timestamp_seconds":
            continue
        for sample in family.samples:
            daemon, kind = sample.labels.get("daemon"), sample.labels.get("kind")
            if sample.value > 0 and (daemon not in out or sample.value > out[daemon][0]):
                out[daemon] = (sample.value, kind)
    return out
