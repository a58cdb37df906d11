"""`appliance up`: prepare the state directory, then run the API and every daemon as child
processes until SIGINT/SIGTERM.

Children get the supervisor's effective settings as APPLIANCE_* variables, die with it
(PR_SET_PDEATHSIG, even when it is SIGKILLed) and are restarted when they die, with an
exponential back-off for one that keeps dying young. See docs/supervisor.md.

Children are forked from the supervisor, which imports every module they run once, before
any of them starts (a "zygote"): their code and the libraries' objects stay shared
copy-on-write pages instead of one private copy per process, which halves the appliance's
memory (docs/supervisor.md, "Memory"). So the supervisor never starts a thread: forking a
threaded process can leave the child holding locks no thread will ever release.

The on-demand daemons (daemons.ON_DEMAND) stop by themselves once idle (daemons/base.py)
and are forked again at the next write to their work's kinds, or when a timer of theirs is
due; the supervisor compares the generations a daemon handled with the lock files' once it
has reaped it, so a write that lands while it stops starts it again
(docs/on-demand-daemons.md, "Stopping when idle").
"""

import argparse
import ctypes
import fcntl
import gc
import importlib
import json
import logging
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback

from appliance import config, daemon_state, devnode, logs, metrics
from appliance.processes import start_time
from daemons import DAEMONS, ON_DEMAND, module_of
from daemons.base import idle_stop_seconds
from state.collection import LOCK_DIR

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36

POLL_SECONDS = 0.1
STABLE_SECONDS = 30.0          # a child up this long has its back-off forgotten
BACKOFF_FIRST_SECONDS = 0.5    # wait before the 2nd quick restart in a row; doubles
BACKOFF_MAX_SECONDS = 30.0
STOP_GRACE_SECONDS = 5.0
HEALTH_PROBE_SECONDS = 0.5

# besides daemons.ON_DEMAND: the backup daemon, which without a backup_schedule only idles
# (with one it stays: daemons/backup.py)
IDLE_STOPPERS = {"backup"}

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

log = logging.getLogger("appliance.supervisor")
_libc = ctypes.CDLL(None, use_errno=True)

# glibc malloc settings of the supervisor, inherited by every child it forks. The API hashes
# passwords with scrypt (a 16 MB buffer per login): with glibc's defaults the first free of
# such a buffer raises the mmap threshold to 16 MB, after which each one comes from a
# thread's arena and stays there: 8 threads, 8 arenas, 300 MB after a few hundred logins.
# A fixed threshold (which also turns the dynamic one off) keeps every block of 1 MB or more
# in mmap, returned on free; two arenas bound what the threads' fragmentation keeps.
# The API's systemd unit sets the same with MALLOC_ARENA_MAX and MALLOC_MMAP_THRESHOLD_.
M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8
MMAP_THRESHOLD_BYTES = 1024 * 1024
ARENA_MAX = 2


def tune_malloc():
    _libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    _libc.mallopt(M_ARENA_MAX, ARENA_MAX)


def python_command(module):
    """argv of `python -m module` that imports this tree whatever the working directory:
    `-m` puts the working directory first on sys.path, so started from another checkout it
    would run that one's code; -P (Python 3.11+) leaves it out and PYTHONPATH decides."""
    flags = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *flags, "-m", module]


def tree_first_pythonpath(environ):
    """PYTHONPATH of `environ` with this tree's root in front."""
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([PROJECT_ROOT] + rest)


def child_modules():
    """(name, module) of every child process, the API first. A child runs module.main(),
    as `python -m module` does (which is what the systemd units run)."""
    return [("api", "appliance.server")] + [(name, module_of(name)) for name in DAEMONS]


def preload():
    """Import everything the children run, once, in the supervisor, and freeze it.

    gc.freeze() moves these objects out of the collector's reach: a collection in a child
    would otherwise write to every one of them and so copy every shared page."""
    from appliance.app import capabilities  # noqa: PLC0415 (only now: see the docstring)
    modules = [module for _, module in child_modules()]
    # a capability's routes are imported when the API registers them
    modules += [module for capability in capabilities()
                for module in (capability.resources, *capability.preload)]
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:
            # Not fatal here: the child that needs it fails at start, logs why and is
            # restarted with a back-off, while the others run, as with any broken child.
            log.exception("cannot preload %s", module)
    metrics.client()            # what every child writes its metrics with
    gc.collect()
    gc.freeze()


class Generations:
    """The change generation of kinds, read from their lock files (state/lock.py: the
    first 8 bytes, bumped by every write) without opening the store: the supervisor runs
    no application code. Descriptors stay open (read-only: closing one is no write)."""

    def __init__(self, state_dir):
        self.locks = os.path.join(state_dir, LOCK_DIR)
        self._fds = {}

    def __call__(self, kind):
        fd = self._fds.get(kind)
        if fd is None:
            try:
                fd = os.open(os.path.join(self.locks, kind + ".lock"), os.O_RDONLY)
            except FileNotFoundError:
                return 0          # never opened: no write yet (KindLock.state says 0 too)
            self._fds[kind] = fd
        raw = os.pread(fd, 8, 0)
        return struct.unpack("<Q", raw)[0] if len(raw) == 8 else 0

    def close(self):
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = {}


_generations = None     # the supervisor's Generations: a forked child closes its copy


def run_child(name, module, env, parent_pid, idle_seconds=None):
    """In a freshly forked child: run module.main() as `python -m module` would. Never
    returns: it ends the process with main()'s exit code. `idle_seconds`: the daemon stops
    by itself once idle that long (daemons/base.py)."""
    code = 1
    try:
        # SIGTERM this child when the supervisor dies, however it dies.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        # The parent may have died between fork and prctl: then nobody would signal us.
        if os.getppid() != parent_pid:
            os._exit(1)
        release_state_lock_in_child()
        if _generations is not None:
            _generations.close()
        if idle_seconds is not None:
            from daemons.base import Daemon  # noqa: PLC0415 (preloaded: no import here)
            Daemon.idle_stop_seconds = idle_seconds
        _libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)   # what ps and top show
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [module]
        # main(): what `python -m module` runs too; the module itself is already imported
        code = importlib.import_module(module).main() or 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        # os._exit: never unwind into the supervisor's loop, nor run its atexit handlers
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def child_environment(settings, config_file=None, environ=None):
    """The environment that makes config.load() in a child return exactly `settings`.

    Unset (None) settings cannot be written as variables, so the child also reads the
    config file the supervisor read: the values it takes from there are the same ones."""
    env = dict(os.environ if environ is None else environ)
    for key in config.DEFAULTS:
        env.pop("APPLIANCE_" + key.upper(), None)
    for key, value in settings.items():
        if key in config.DEFAULTS and value is not None:
            env["APPLIANCE_" + key.upper()] = str(value)
    env.pop("APPLIANCE_CONFIG", None)
    if config_file:
        env["APPLIANCE_CONFIG"] = os.path.abspath(config_file)
    # What a child starts (a build, a tool) imports appliance/ from this tree too.
    env["PYTHONPATH"] = tree_first_pythonpath(env)
    return env


def effective_config_file(config_file=None, environ=None):
    """The config file config.load() reads for these arguments, or None."""
    environ = os.environ if environ is None else environ
    path = config_file or environ.get("APPLIANCE_CONFIG")
    if path is None and os.path.exists(config.DEFAULT_CONFIG_FILE):
        path = config.DEFAULT_CONFIG_FILE
    return path or None


def describe_status(status):
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


class Child:
    """One supervised process: its module, its current pid and its restart history."""

    def __init__(self, name, module):
        self.name = name
        self.module = module
        self.pid = None            # of the running instance, if any
        self.started_at = None
        self.quick_deaths = 0      # deaths in a row, each before STABLE_SECONDS of uptime
        self.start_after = 0.0     # monotonic time before which it is not restarted
        # stopped while idle: the daemon's idle record (daemons/base.py), {"kinds":
        # {kind: generation}, "wake_at": Unix time or None}; forked again at a write to
        # one of those kinds or at wake_at
        self.idle = None

    def restart_delay(self):
        """The first quick death restarts at once; later ones wait longer and longer."""
        if self.quick_deaths <= 1:
            return 0.0
        return min(BACKOFF_FIRST_SECONDS * 2 ** (self.quick_deaths - 2), BACKOFF_MAX_SECONDS)


class Supervisor:
    def __init__(self, settings, out=sys.stdout, config_file=None):
        self.settings = settings
        self.out = out
        self.env = child_environment(settings, config_file)
        self.children = [Child(name, module) for name, module in child_modules()]
        self.idle_seconds = idle_stop_seconds()
        self.on_demand = set(ON_DEMAND) | IDLE_STOPPERS     # the children that stop when idle
        global _generations
        _generations = self.generations = Generations(settings["state_dir"])
        self.stop_requested = False
        self.api_announced = False
        self._next_probe = 0.0
        self._adopted = {}
        self._next_adopted_check = 0.0

    # -- running -------------------------------------------------------------------------

    def run(self):
        # Orphaned grandchildren are re-parented to us rather than to init, so that we can
        # reap them and make sure none outlives `appliance up`.
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        for child in self.children:
            self.spawn(child)
        while not self.stop_requested:
            self.reap()
            now = time.monotonic()
            for child in self.children:
                if child.idle is not None and self.woken(child):
                    child.idle = None
                if child.pid is None and child.idle is None and now >= child.start_after \
                        and not self.stop_requested:
                    self.spawn(child)
            self.announce_api_when_ready()
            self.record_adopted_when_due()
            time.sleep(POLL_SECONDS)
        self.shutdown()
        return 0

    def request_stop(self, signum, frame):
        # Only a flag: the main loop notices it within POLL_SECONDS.
        self.stop_requested = True

    def spawn(self, child):
        # Forked from the main thread on purpose: PDEATHSIG fires when the forking *thread*
        # exits, and the main thread lives exactly as long as the supervisor.
        if threading.active_count() != 1:
            raise RuntimeError("the supervisor started a thread: forking is no longer safe")
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as e:
            child.pid = None
            child.quick_deaths += 1
            child.start_after = time.monotonic() + max(child.restart_delay(), 1.0)
            log.error("cannot start %s: %s", child.name, e)
            return
        if pid == 0:
            run_child(child.name, child.module, self.env, parent,
                      self.idle_seconds if child.name in self.on_demand else None)
        child.pid = pid
        child.started_at = time.monotonic()
        log.info("started %s (pid %d)", child.name, child.pid)

    def reap(self):
        """Collect every exited child; schedule the restart of a supervised one."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = next((c for c in self.children if c.pid == pid), None)
            if child is None:
                log.debug("reaped adopted orphan %d (%s)", pid, describe_status(status))
                continue
            self.on_child_exit(child, status)

    def on_child_exit(self, child, status):
        uptime = time.monotonic() - child.started_at
        metrics.process_dead(child.pid)
        pid, child.pid = child.pid, None
        if self.stop_requested:
            return
        idle = self.idle_record(child, pid, status)
        if idle is not None:
            child.quick_deaths = 0
            child.start_after = 0.0
            moved = self.moved(idle)
            if moved:
                # written after its last look: started again at once, nothing lost
                log.info("%s stopped while idle, but %s moved since: starting it again",
                         child.name, ", ".join(moved))
            else:
                child.idle = idle
                wakes = ([f"at the next write to {', '.join(idle['kinds'])}"]
                         if idle["kinds"] else [])
                if idle.get("wake_at") is not None:
                    wakes.append(f"in {max(idle['wake_at'] - time.time(), 0):.0f} s")
                log.info("%s stopped while idle; started again %s", child.name,
                         " or ".join(wakes) or "when `appliance up` starts again (it "
                         "watches no kind and has no timer)")
            return
        child.quick_deaths = child.quick_deaths + 1 if uptime < STABLE_SECONDS else 1
        delay = child.restart_delay()
        child.start_after = time.monotonic() + delay
        log.warning("%s %s after %.1f s; restarting in %.1f s",
                    child.name, describe_status(status), uptime, delay)
        # what GET /v1/system/daemons reads (appliance/daemon_state.py)
        daemon_state.record_ended(self.settings["state_dir"], child.name,
                                  describe_status(status), restart_at=time.time() + delay)

    # -- stopped while idle --------------------------------------------------------------

    def idle_record(self, child, pid, status):
        """The idle record `child` left at its clean exit (daemons/base.py), or None when
        it ended for another reason."""
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            return None
        record = daemon_state.read_record(self.settings["state_dir"], child.name)
        if not record or record.get("pid") != pid or not isinstance(record.get("idle"), dict):
            return None
        idle = record["idle"]
        if not isinstance(idle.get("kinds"), dict):
            return None
        return idle

    def moved(self, idle):
        """The kinds of an idle record whose generation is no longer the one the daemon
        handled."""
        return [kind for kind, generation in idle["kinds"].items()
                if self.generations(kind) != generation]

    def woken(self, child):
        """Whether a sleeping child must run again: a write to one of its kinds, or its
        own timer due."""
        wake_at = child.idle.get("wake_at")
        if wake_at is not None and time.time() >= wake_at:
            log.info("%s: its timer is due: starting it", child.name)
            return True
        moved = self.moved(child.idle)
        if moved:
            log.info("%s: %s written: starting it", child.name, ", ".join(moved))
        return bool(moved)

    # -- readiness -----------------------------------------------------------------------

    def api_url(self, host=None):
        host = host or self.settings["api_host"]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.settings['api_port']}"

    def announce_api_when_ready(self):
        if self.api_announced or time.monotonic() < self._next_probe:
            return
        self._next_probe = time.monotonic() + HEALTH_PROBE_SECONDS
        # A wildcard listen address is not one to connect to: probe loopback instead.
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(
            self.settings["api_host"], self.settings["api_host"])
        if health_status(host, self.settings["api_port"], HEALTH_PROBE_SECONDS) == 200:
            self.api_announced = True
            print(f"appliance API is ready at {self.api_url()}", file=self.out, flush=True)
            print(f"web console at {self.api_url()}/console/ (log in as admin; "
                  "docs/console.md)", file=self.out, flush=True)

    # -- stopping ------------------------------------------------------------------------

    def shutdown(self):
        """Ask every child and adopted daemon to stop, SIGKILL the whole tree below us
        once the grace period is over, reap all."""
        log.info("stopping")
        asked = set()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while self.living_pids() and time.monotonic() < deadline:
            # each round: a daemon adopted meanwhile (its parent just exited) is asked too
            asked |= self.ask_to_stop(self.top_pids() - asked)
            time.sleep(POLL_SECONDS / 2)
            self.reap()
        leftovers = self.living_pids()
        if leftovers:
            log.warning("killing processes that did not stop when asked: %s",
                        " ".join(map(str, sorted(leftovers))))
            self.signal_all(signal.SIGKILL)
            # Bounded: a process stuck in the kernel (state D) dies only when it leaves it.
            deadline = time.monotonic() + STOP_GRACE_SECONDS
            while self.living_pids() and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS / 2)
                self.reap()
        if not self.living_pids():
            forget_adopted(self.settings["state_dir"])
        log.info("stopped")

    def record_adopted_when_due(self):
        """Keep <state>/appliance-up.adopted listing the daemons a child started that we
        adopted (pid and start time), so that the next `appliance up` can stop them should
        this supervisor die without stopping them (SIGKILL: PDEATHSIG reaches only the
        children forked here)."""
        now = time.monotonic()
        if now < self._next_adopted_check:
            return
        self._next_adopted_check = now + ADOPTED_CHECK_SECONDS
        supervised = {c.pid for c in self.children}
        adopted = {}
        for pid in children_of(os.getpid()):
            started = start_time(pid)
            if pid not in supervised and started is not None:
                adopted[pid] = started
        if adopted != self._adopted:
            record_adopted(self.settings["state_dir"], adopted)
            self._adopted = adopted

    def top_pids(self):
        """Our supervised children and the orphans adopted as subreaper: the daemons a
        child started (nginx's master, PostgreSQL's postmaster) are among them."""
        pids = {c.pid for c in self.children if c.pid is not None}
        return pids | set(children_of(os.getpid()))

    def living_pids(self):
        """top_pids and every process below them (see descendants_of)."""
        return self.top_pids() | descendants_of(os.getpid())

    def ask_to_stop(self, pids):
        """The stop signal to each of `pids` (see stop_signal_of); the pids asked."""
        for pid in pids:
            try:
                os.kill(pid, stop_signal_of(pid))
            except ProcessLookupError:
                pass
        return set(pids)

    def signal_all(self, signum):
        for pid in self.living_pids():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass


def stop_signal_of(pid):
    """SIGTERM, but SIGINT for a PostgreSQL postmaster: its SIGTERM is a "smart" shutdown
    that waits for every client to disconnect (an open psql would hold the stop until the
    SIGKILL, and a killed postmaster means crash recovery at the next start); SIGINT is
    its "fast" shutdown: clients are disconnected, a checkpoint is written."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
    except OSError:
        return signal.SIGTERM
    return signal.SIGINT if name in ("postgres", "postmaster") else signal.SIGTERM


def health_status(host, port, timeout):
    """The HTTP status of GET /v1/health, or None when there is no answer. One plain
    HTTP/1.0 request on a socket: it never goes through a proxy of the environment."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"GET /v1/health HTTP/1.0\r\nHost: appliance\r\n\r\n")
            head = b""
            while b"\r\n" not in head and len(head) < 1024:
                chunk = conn.recv(1024)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return None
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None
    return int(parts[1])


def bootstrap_in_child(settings):
    """Run appliance.bootstrap in a forked child and return its line; None if it failed.

    Forked so that what it allocates (the records it reads, scrypt's 16 MB for the admin
    password) is paid for in a process that exits, not kept by the supervisor, and so
    shared with every child, for the appliance's whole life."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 1
        try:
            from appliance.bootstrap import bootstrap  # noqa: PLC0415 (the reason above)
            from appliance.migrations import MigrationError  # noqa: PLC0415
            try:
                os.write(write_end, bootstrap(settings).encode())
                code = 0
            except MigrationError as e:
                log.error("%s", e)      # says it all: no traceback
        except BaseException:
            log.exception("cannot prepare the state directory %s", settings["state_dir"])
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        line = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    return line if os.waitstatus_to_exitcode(status) == 0 else None


def children_of(pid):
    """PIDs whose parent is `pid`, zombies excluded (they are gone but for the reaping)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.append(int(entry))
    return found


def descendants_of(pid):
    """Every living process below `pid`, at any depth.

    A stop must reach what the children started, not only the children: the LB driver's
    nginx and the DBaaS driver's PostgreSQL daemonize (a session of their own, so a
    process-group kill misses them), and their master is re-parented to us (subreaper),
    while their workers and backends are the master's children. A master that dies by
    SIGKILL at the end of the grace period would leave its workers behind: so the whole
    tree gets each signal."""
    found, todo = set(), [pid]
    while todo:
        for child in children_of(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


# -- one `appliance up` per state directory ---------------------------------------------
# Two supervisors on one state directory would run two sets of daemons that crash-loop on
# "Address already in use" and race on the state. The lock is an fcntl.flock on
# <state_dir>/appliance-up.pid, held for the supervisor's life: the kernel drops it when
# the process dies, however it dies, so a file left by a crash never blocks a new start.
# The pid written in it is only for the message.

STATE_LOCK_NAME = "appliance-up.pid"
_state_lock_fd = None


class AlreadyRunning(Exception):
    def __init__(self, path, pid):
        self.path, self.pid = path, pid
        super().__init__(
            f"already running, pid {pid if pid else 'unknown'} (it holds {path}): stop it "
            "first, or give this one another --state-dir")


def hold_state_lock(state_dir):
    """Take the state directory's lock for this process's life, or raise AlreadyRunning."""
    global _state_lock_fd
    os.makedirs(state_dir, exist_ok=True)
    path = os.path.join(state_dir, STATE_LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        finally:
            os.close(fd)
        raise AlreadyRunning(path, int(holder) if holder.isdigit() else None) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _state_lock_fd = fd
    return fd


ADOPTED_NAME = "appliance-up.adopted"
ADOPTED_CHECK_SECONDS = 5.0     # a /proc walk: cheap, but not ten times a second


def record_adopted(state_dir, adopted):
    path = os.path.join(state_dir, ADOPTED_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({str(pid): started for pid, started in adopted.items()}, f)
    os.replace(tmp, path)


def forget_adopted(state_dir):
    try:
        os.unlink(os.path.join(state_dir, ADOPTED_NAME))
    except FileNotFoundError:
        pass


def stop_leftovers(state_dir, grace=STOP_GRACE_SECONDS):
    """Stop what the previous supervisor of this state adopted and left running (it was
    killed): each recorded process that is still the same one (pid and start time), and
    everything below it. Called with the state lock held, so that supervisor is gone.
    Returns the pids stopped."""
    try:
        with open(os.path.join(state_dir, ADOPTED_NAME)) as f:
            recorded = {int(pid): int(started) for pid, started in json.load(f).items()}
    except (OSError, ValueError, AttributeError):
        recorded = {}
    tops = [pid for pid, started in recorded.items() if start_time(pid) == started]
    tree = {}
    for pid in tops:
        for member in {pid} | descendants_of(pid):
            started = start_time(member)
            if started is not None:
                tree[member] = started
    if tops:
        log.warning("stopping what an earlier `appliance up` on %s left running: %s",
                    state_dir, " ".join(f"{_comm(pid)} ({pid})" for pid in sorted(tops)))
    for pid in tops:
        try:
            os.kill(pid, stop_signal_of(pid))
        except ProcessLookupError:
            pass

    def living():
        return [pid for pid, started in tree.items() if start_time(pid) == started]
    deadline = time.monotonic() + grace
    while living() and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS / 2)
    for pid in living():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    forget_adopted(state_dir)
    return tops


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def claim_state(state_dir):
    """The state directory for this supervisor: its lock (AlreadyRunning otherwise), then
    what a killed predecessor left running stopped."""
    hold_state_lock(state_dir)
    stop_leftovers(state_dir)


def release_state_lock_in_child():
    """A forked child closes its copy of the lock's descriptor: the lock belongs to the
    supervisor's life, not to a child that outlives it by a moment."""
    global _state_lock_fd
    if _state_lock_fd is not None:
        try:
            os.close(_state_lock_fd)
        except OSError:
            pass
        _state_lock_fd = None


def run(settings, out=sys.stdout, config_file=None):
    """Run the appliance in the foreground until SIGINT/SIGTERM/SIGHUP. Returns the exit
    code: 1 at once when another `appliance up` runs on the same state directory."""
    try:
        claim_state(settings["state_dir"])
    except AlreadyRunning as e:
        print(f"appliance up: {e}", file=sys.stderr, flush=True)
        return 1
    tune_malloc()
    # before anything that makes a metric is imported: every child inherits the variable
    metrics.prepare(settings["state_dir"])
    daemon_state.clear(settings["state_dir"])
    preload()
    line = bootstrap_in_child(settings)
    if line is None:
        return 1
    print(line, file=out, flush=True)
    settings = prepare_dev_node(settings, out)
    supervisor = Supervisor(settings, out, config_file)
    install_stop_signals(supervisor)
    return supervisor.run()


def prepare_dev_node(settings, out):
    """The development node (appliance/devnode.py, docs/dev-node.md): registered before
    any child starts, and the settings its agent needs. Off (`dev_node: false`), or when
    its registration failed (logged), the settings are returned as they are."""
    if not devnode.enabled(settings):
        return settings
    if not devnode.register_in_child(settings):
        return settings
    root, _, _ = devnode.paths(settings)
    print(f"development node {devnode.NAME} at {devnode.ADDRESS}: its files under {root} "
          "(docs/dev-node.md)", file=out, flush=True)
    return devnode.child_settings(settings)


def install_stop_signals(supervisor):
    """SIGTERM, SIGINT and SIGHUP stop the supervisor and all it started. SIGHUP (the
    terminal closed) too: dying of it would leave the daemonized grandchildren (nginx,
    PostgreSQL) behind, as PDEATHSIG reaches only the children forked here."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, supervisor.request_stop)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="appliance up",
        description="Run the API and every daemon in the foreground until SIGINT/SIGTERM.")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="state directory (APPLIANCE_STATE_DIR; default ./var)")
    parser.add_argument("--api-host", metavar="H",
                        help="address the API listens on (APPLIANCE_API_HOST; default 127.0.0.1)")
    parser.add_argument("--api-port", metavar="N", type=int,
                        help="API port (APPLIANCE_API_PORT; default 11010)")
    parser.add_argument("--dns-port", metavar="N", type=int,
                        help="DNS port, UDP and TCP (APPLIANCE_DNS_PORT; default 5353)")
    parser.add_argument("--config", metavar="FILE",
                        help=f"config file (APPLIANCE_CONFIG; default {config.DEFAULT_CONFIG_FILE} if present)")
    return parser.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if __name__ != "__main__":
        # Called from another program (the `appliance` CLI, with its own modules loaded):
        # become a fresh `python -m appliance.supervisor` instead. Same pid, terminal and
        # environment, but only the supervisor's modules, for the appliance's whole life.
        sys.stdout.flush()
        sys.stderr.flush()
        env = dict(os.environ, PYTHONPATH=tree_first_pythonpath(os.environ))
        os.execve(sys.executable, python_command("appliance.supervisor") + argv, env)
    args = parse_args(argv)
    overrides = {"state_dir": args.state_dir, "api_host": args.api_host,
                 "api_port": args.api_port, "dns_port": args.dns_port}
    try:
        settings = config.load(config_file=args.config, overrides=overrides)
    except config.ConfigError as e:
        print(f"appliance up: {e}", file=sys.stderr)
        return 2
    logs.setup("supervisor", str(settings["log_level"]).upper())
    return run(settings, config_file=effective_config_file(args.config))


if __name__ == "__main__":
    sys.exit(main())
