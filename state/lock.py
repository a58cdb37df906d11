"""Cross-process lock of one kind, plus its change generation.

A kind's lock file `<kind>.lock` is locked with flock(2) around every write. Its first
8 bytes hold a generation counter, bumped by each writer *after* its journal line is on
disk (or its compaction is in place), so that any process can tell with one pread (and a
stat of the journal) whether its state is stale, and the change watch gets an event.
"""

import fcntl
import mmap
import os
import struct
import threading

from .wake import wake_sleepers

_GEN = struct.Struct("<Q")
_PENDING = _GEN.size        # offset of the second counter: non-zero while a writer is inside
_HEADER = _GEN.size * 2


class KindLock:
    def __init__(self, path, sleepers=None):
        self.path = path
        # `<state>/.sleep/<kind>`: the processes that stopped and must be woken by a write
        # to this kind (state/wake.py); None for the locks that guard no kind
        self._sleepers = sleepers
        # read-only until this process first changes something under the lock: closing a
        # descriptor open for writing is an IN_CLOSE_WRITE on the file even if nothing was
        # written, which the image's path units take for a write (docs/on-demand-daemons.md)
        self._fd = _open_or_create(path)
        self._wfd = None
        self._changing = False   # the section held sets `pending` (it may change files)
        # flock is held per open file description, which all threads of this process
        # share through _fd: a thread lock serializes them first.
        self._threads = threading.RLock()
        self._depth = 0
        # the counters' page, mapped once the file holds both: every read of the API checks
        # them, and a pread is a syscall that lets go of the GIL (issue 11)
        self._view = None
        self._bumped = False

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def acquire(self, blocking=True, changing=True):
        """Take the lock; with blocking=False return False at once if another holds it.
        changing=False: the section only reads (a backup), and the lock file is not
        written at all."""
        if not self._threads.acquire(blocking):
            return False
        outermost = self._depth == 0
        if outermost:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                self._threads.release()
                return False
            except BaseException:
                self._threads.release()
                raise
            self._bumped = False
            self._changing = False
        if changing and not self._changing:
            try:
                # before any change: readers that see it look at the journal itself
                os.pwrite(self._writable(), _GEN.pack(1), _PENDING)
                if self._sleepers is not None:
                    # inside the exclusive flock, before the change: a writer killed
                    # half-way still leaves the mark (state/wake.py, why nothing is lost)
                    wake_sleepers(self._sleepers)
            except BaseException:
                if outermost:
                    self._release()
                else:
                    self._threads.release()
                raise
            self._changing = True
        self._depth += 1
        return True

    def release(self, changed=True):
        """changed=False: the section only read (a backup), so the generation stays and
        nobody watching the kind is woken for nothing."""
        self._depth -= 1
        if self._depth == 0:
            try:
                # a section that changed files without a bump (a journal created for a
                # write that was refused) still moves the generation; a writer killed
                # inside leaves `pending` set, and readers keep checking the journal
                if self._changing:
                    if changed and not self._bumped:
                        self.bump_generation()
                    os.pwrite(self._wfd, _GEN.pack(0), _PENDING)
            finally:
                self._changing = False
                self._release()
        else:
            self._threads.release()

    def _writable(self):
        if self._wfd is None:
            self._wfd = os.open(self.path, os.O_RDWR)
        return self._wfd

    def _release(self):
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def held(self):
        """True while a thread of this process holds the lock."""
        return self._depth > 0

    def settled_generation(self, read_more=lambda: None):
        """The generation (and whatever read_more() reads) while no writer is between
        replacing the file and bumping the counter: a shared flock waits for it."""
        with self._threads:
            if self._depth == 0:
                fcntl.flock(self._fd, fcntl.LOCK_SH)
            try:
                return self.generation(), read_more()
            finally:
                if self._depth == 0:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def generation(self):
        return self.state()[0]

    def settled_at(self, generation):
        """True when the counters are mapped, no writer is inside and the generation is
        still `generation`: the common answer of state(), for the read path's check of
        every kind it reads (several per API request), without building a tuple."""
        view = self._view
        return view is not None and not _GEN.unpack_from(view, _PENDING)[0] \
            and _GEN.unpack_from(view, 0)[0] == generation

    def state(self):
        """(generation, settled): settled is True when no writer is inside its section nor
        died inside one since the last completed section. Then a generation that did not
        move means that the kind's files did not either."""
        view = self._view
        if view is not None:
            pending = _GEN.unpack_from(view, _PENDING)[0]
            # pending first: a writer sets it before its change and bumps after
            return _GEN.unpack_from(view, 0)[0], not pending
        raw = os.pread(self._fd, _HEADER, 0)
        if not raw:
            # never locked: a writer's first act under the lock is to set `pending`,
            # before it changes anything, so nothing has been written to the kind yet
            # (opening a kind does not lock it: Collection.__init__)
            return 0, True
        if len(raw) != _HEADER:
            return (_GEN.unpack_from(raw)[0] if len(raw) >= _GEN.size else 0), False
        # a shared mapping sees other processes' pwrite at once (one page cache); the
        # file never shrinks, so the mapped bytes stay inside it
        self._view = mmap.mmap(self._fd, _HEADER, prot=mmap.PROT_READ)
        return _GEN.unpack_from(raw)[0], not _GEN.unpack_from(raw, _PENDING)[0]

    def bump_generation(self):
        """Called by the lock holder after its change is on disk."""
        gen = self.generation() + 1
        os.pwrite(self._writable(), _GEN.pack(gen), 0)
        self._bumped = True
        return gen

    def close(self):
        with self._threads:
            view, self._view = self._view, None
            if view is not None:
                try:
                    view.close()
                except BufferError:     # a reader is inside unpack_from: GC closes it
                    pass
            for fd in (self._fd, self._wfd):
                if fd is not None:
                    os.close(fd)
            self._fd = self._wfd = None


def _open_or_create(path):
    """The lock file, opened read-only; a new one is made with its counters (zeros) in
    place, so that readers map them from the start: an empty file cannot be mapped, and a
    kind nobody ever wrote cost every read of it a pread (issue 32: the API's token check
    reads iam_revoked_sessions on every request). Made under another name and linked into
    place: no process ever sees it without its counters, nor opens the lock file itself
    for writing; of two processes making it, the first link wins."""
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        pass
    # not `.lock`: the change watch and the path units look at `<kind>.lock` only
    draft = f"{path}.{os.getpid()}-{threading.get_ident()}.new"
    try:
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, bytes(_HEADER))
        finally:
            os.close(fd)
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
    finally:
        try:
            os.unlink(draft)
        except FileNotFoundError:
            pass
    return os.open(path, os.O_RDONLY)


def acquire_all(locks, changing=True):
    """Take every lock of `locks` without ever waiting while holding one: wait for one,
    try the others; when one is busy, let all go and start again by waiting for that one.
    So no order of nesting elsewhere (a write to one kind under another's lock) can
    deadlock with it. Release them with release_all."""
    if not locks:
        return
    first = 0
    while True:
        locks[first].acquire(changing=changing)
        held, busy = [locks[first]], None
        for i, lock in enumerate(locks):
            if i != first:
                if not lock.acquire(blocking=False, changing=changing):
                    busy = i
                    break
                held.append(lock)
        if busy is None:
            return
        release_all(held, changed=False)
        first = busy


def release_all(locks, changed=True):
    for lock in reversed(locks):
        lock.release(changed)
