"""Sleep and wake marks: how a process that stopped is told that a kind it sleeps on was
written, by a file whose mere existence says so (docs/store.md, "Sleep and wake marks").

Why: in the image, systemd starts an on-demand daemon again with a path unit. Its
`PathModified=` on the kinds' lock files is edge-triggered and blind while the daemon runs
and until the unit is inactive, so a write that lands while the daemon stops would be
lost. `PathExists=` is checked again when the path unit re-arms: so a write must leave a
*file*, but only for a daemon that sleeps on its kind (a mark per write for nobody would
cost every write a file), docs/on-demand-daemons.md.

- A process about to stop *sleeps on* kinds under a name: `sleep(state, name, kinds)`
  creates `<state>/.sleep/<kind>/<name>` for each kind, then reads each kind's generation
  again under a shared flock of its lock. If one moved from what it last reconciled, it
  takes its entries back (`forget`) and does not stop.
- Every writer, inside its exclusive flock of a kind, once the section may change files
  (state/lock.py sets `pending`), looks at `<state>/.sleep/<kind>/` (`wake_sleepers`; a
  scandir that fails at once when the folder is absent: a few microseconds, measured by
  bench_store) and, for each sleeper, creates `<state>/.wake/<name>` (O_CREAT, EEXIST
  ignored) and removes that sleep entry.
- A started process consumes its mark and its leftover sleep entries (`forget`) before
  its first look at the generations: any write before that, it sees itself.

Why nothing is lost (Dekker's pattern, made exact by the lock): the sleeper's entry is made
before it takes the shared flock to read the generation; the writer scans inside its
exclusive flock, and bumps the generation before letting it go. Either the sleeper's
shared flock comes first: its entry existed before the writer's section began, and the
writer's scan sees it (a mark); or the writer's section comes first: the sleeper reads the
bumped generation (it does not stop). Both may happen: then the sleeper, staying up,
removes the mark too. The flock (the kernel's lock of the open file) orders the two
processes' file operations; no memory-order argument about a shared page is needed.

The writer scans when its section begins to change files, not after its bump: inside one
exclusive section the order does not matter to the argument above, and a writer killed
between its change and its bump still leaves the mark (a needless start at worst, never a
missed one).

A timed sleep (a process that must run again at a time of its own, with no write to say
so): `sleep(..., wake_at=T)` also leaves `<state>/.sleep/.at/<name>` whose mtime is T
(rounded up to the second). Something outside the process (in the image, the
root-installed `appliance-wake.path` and its small shell loop, docs/on-demand-daemons.md)
turns each entry whose time passed into `<state>/.wake/<name>` and removes it. The entry is
written under a dot name in `.sleep/` and renamed into place, so that it is never seen with
the mtime of its creation (due at once). It changes nothing in the argument above: the kind
entries are made and read as before, and a write wakes the process through them whatever
its timer. `forget` takes the timed entry back too.

Owners: first boot makes `.sleep/`, `.sleep/.at/` and `.wake/` and hands them to the appliance user; the
sleeper (the appliance user) makes each `.sleep/<kind>/` itself. A writer never makes a
folder, only a mark file in `.wake/`, and unlinks entries: a writer running as root leaves
at most a root-owned mark, which the appliance user may still remove (removal is the
folder's permission, and `.wake/` is the appliance user's, without the sticky bit).
"""

import math
import os

SLEEP_DIR = ".sleep"
WAKE_DIR = ".wake"
# in SLEEP_DIR: the timed entries (never a kind: a kind's name does not start with a dot)
TIMED_DIR = ".at"
# in SLEEP_DIR: a timed entry being made, before its rename into TIMED_DIR
TIMED_STAGING = ".at-new-"


def sleepers_dir(state_dir, kind):
    """The folder a writer of `kind` looks at (state/lock.py gets it from Collection)."""
    return os.path.join(state_dir, SLEEP_DIR, kind)


def timed_path(state_dir, name):
    """The timed entry of `name`: its mtime is when it must be woken."""
    return os.path.join(state_dir, SLEEP_DIR, TIMED_DIR, name)


def _timed_staging(state_dir, name):
    # beside TIMED_DIR, not in it: its watcher must never see an entry without its time
    return os.path.join(state_dir, SLEEP_DIR, TIMED_STAGING + name)


def mark_path(state_dir, name):
    return os.path.join(state_dir, WAKE_DIR, name)


def wake_sleepers(sleepers):
    """(a writer, inside its exclusive flock of the kind) A mark for each process sleeping
    on the kind, and its sleep entry removed. `sleepers` is `<state>/.sleep/<kind>`."""
    try:
        entries = os.scandir(sleepers)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        # no sleeper ever (`appliance up`, tests), or a user that is not the state's
        return
    wake = os.path.join(os.path.dirname(os.path.dirname(sleepers)), WAKE_DIR)
    with entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                os.close(os.open(os.path.join(wake, entry.name),
                                 os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 0o644))
            except FileExistsError:
                pass
            except OSError:
                # `.wake/` removed by hand after the sleeper made it: the entry stays, and a
                # write never fails for a mark
                continue
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass


def sleep(state_dir, name, kinds, expected, generation_of, wake_at=None):
    """Sleep on `kinds` under `name`: True when the process may stop (every writer from now
    on leaves `.wake/<name>`), False when a kind moved from `expected[kind]` (its entries
    are taken back: the caller goes on). `generation_of(kind)` reads a kind's generation
    under a shared flock of its lock (KindLock.settled_generation). `wake_at` (Unix time):
    also a timed entry, for whoever wakes timed sleepers (module docstring)."""
    os.makedirs(os.path.join(state_dir, WAKE_DIR), mode=0o755, exist_ok=True)
    for kind in kinds:
        folder = sleepers_dir(state_dir, kind)
        os.makedirs(folder, mode=0o755, exist_ok=True)
        os.close(os.open(os.path.join(folder, name),
                         os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
    moved = [kind for kind in kinds if generation_of(kind) != expected.get(kind)]
    if moved:
        forget(state_dir, name, kinds)
        return False
    if wake_at is not None:
        sleep_until(state_dir, name, wake_at)
    return True


def sleep_until(state_dir, name, wake_at):
    """The timed entry of `name`, due at `wake_at` (rounded up to the whole second: its
    waker compares whole seconds, and a process woken early would find its timer not yet
    due). Made under another name and renamed, so that it appears with its time."""
    folder = os.path.join(state_dir, SLEEP_DIR, TIMED_DIR)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    staging = _timed_staging(state_dir, name)
    os.close(os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
    when = math.ceil(wake_at)
    os.utime(staging, (when, when))
    os.replace(staging, timed_path(state_dir, name))


def forget(state_dir, name, kinds=None):
    """A started (or staying) process: its mark and its sleep entries gone. `kinds`: the
    kinds it may have slept on (None: every folder of `.sleep/`)."""
    if kinds is None:
        try:
            kinds = os.listdir(os.path.join(state_dir, SLEEP_DIR))
        except OSError:
            kinds = ()
    for path in [os.path.join(sleepers_dir(state_dir, kind), name) for kind in kinds] + [
            timed_path(state_dir, name), _timed_staging(state_dir, name),
            mark_path(state_dir, name)]:
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            pass


def woken(state_dir, name):
    return os.path.exists(mark_path(state_dir, name))


def clear(state_dir):
    """First boot, before anything of this boot writes: no process sleeps yet, and a mark
    left by the last boot would start its daemon for nothing when its path unit starts.
    Makes the folders (the caller hands them to the appliance user); the timed entries
    go too (a daemon with work is started by first boot, and sleeps again with its timer)."""
    for folder in (SLEEP_DIR, os.path.join(SLEEP_DIR, TIMED_DIR), WAKE_DIR):
        os.makedirs(os.path.join(state_dir, folder), mode=0o755, exist_ok=True)
    top = os.path.join(state_dir, SLEEP_DIR)
    for kind in os.listdir(top):
        path = os.path.join(top, kind)
        if os.path.isdir(path) and not os.path.islink(path):
            for entry in os.listdir(path):
                _unlink(os.path.join(path, entry))
        elif kind.startswith(TIMED_STAGING):
            _unlink(path)
    wake = os.path.join(state_dir, WAKE_DIR)
    for entry in os.listdir(wake):
        _unlink(os.path.join(wake, entry))


def _unlink(path):
    try:
        os.unlink(path)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        pass

