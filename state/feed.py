"""The change feed: every committed write of every kind, numbered across kinds and
processes, kept for a bounded window. See docs/store.md ("Change feed") and docs/events.md.

Why here and not beside the kinds: readers (event streams, the audit trail, the console)
ask "everything after revision R" and must miss nothing, while the change watch only says
"kind K moved". So a write of any kind takes one more lock, the feed's, *inside* its kind's
lock (never the other way round), twice, and its journal's fdatasync runs between the two,
so that writes of different kinds fdatasync in parallel:

1. (feed lock) takes a *ticket* (a number per journal line, in commit order) and a slot of
   the slot table in the feed's lock file (ticket, kind, journal inode, offset; state
   in flight), and holds that slot's liveness lock (`slot-<i>.lock`, flock) until step 3;
2. (no feed lock) writes its journal line, which carries the ticket and the note the
   entries are made from (`"feed": [ticket, ...]`), and fdatasyncs it: the commit;
3. (feed lock) marks its slot durable, then *publishes*: while the lowest ticket of the
   table is durable, its entries get the next sequence numbers, go to the current
   segment (no fsync of its own), and the counter moves; a ticket below in flight keeps
   every later one waiting (a reader never reads past it). A writer whose ticket is not
   published yet waits until a lower writer's publication takes it along, and only then
   returns: a write that returned is in the feed.

Sequence numbers are handed out at publication, in ticket order, so they have no gaps even
when a ticket is never published. A writer that took the last ticket too and finds no slot
in use holds the feed lock from step 1 to step 3 (the lock sections of a single writer
cost more than the parallelism nobody would use); the next write after another writer's
ticket takes the three steps again. A writer killed between 1 and 3 leaves its slot in
flight with its liveness lock free; whoever waits behind it (or compacts its kind) takes
the lock, sees the owner gone, and looks at the line: complete (every reader of the kind
sees the write: it is committed) -> fdatasync it, durable; torn or absent (never
acknowledged, and the kind's next writer cuts it off) -> the ticket is dropped. So a
committed write always gets its entries and an uncommitted one never does. A compaction
of a kind waits until no slot points into its journal, then fsyncs the segment, so the
journal line a slot points at is there when it is resolved. A power loss can take the
newest feed entries (the segment is not fsynced on every write) while their journal lines
stay: the first writer after a reboot publishes again, in ticket order, every line past
the last published ticket (`_after_reboot`). Lines durable only past a lost one (its
writer was still in step 2) are published too: no reader saw a number past the lost one,
since numbers are handed out only to durable lines in ticket order.

Files: `<state>/.feed/feed.lock` (the lock; in its first bytes the counter, the current
segment, the tickets and the slot table), `<state>/.feed/slot-<i>.lock` (liveness) and
`<state>/.feed/<first seq>.log`, one JSON line per entry. The directory is hidden: it is
no kind and no private file, so backups do not carry it (a restored state starts a new
window: `Feed.reset`).
"""

import fcntl
import functools
import mmap
import os
import struct
import sys
import threading
import time

import orjson

from .errors import StoreError

FEED_DIR = ".feed"
JOURNAL_SUFFIX = ".journal"     # state/collection.py's, which imports this module
LOCK_NAME = "feed.lock"
BOOT_FILE = "boot"              # the boot id of the last reboot check (_after_reboot)
BOOT_ID = "/proc/sys/kernel/random/boot_id"
SEGMENT_SUFFIX = ".log"
DEFAULT_KEEP_ENTRIES = 100_000
DEFAULT_KEEP_SECONDS = 7 * 86400.0

_U64 = struct.Struct("<Q")
_HEAD = struct.Struct("<QQQ")           # last seq, current segment's first seq, its size
# in the same sector as the head (a power loss tears no pair of them): a format mark,
# the last published ticket, the next ticket to hand out
_TICKETS = struct.Struct("<QQQ")
_TICKETS_AT = _HEAD.size
_FORMAT = 0x4645454400000002            # "FEED" v2; the first format had no tickets
_USED_AT = _TICKETS_AT + _TICKETS.size
_USED = struct.Struct("<Q")             # a bit per slot in use: no walk of a free table
_RESERVER_AT = _USED_AT + _USED.size    # who took the last ticket (Feed._reserve)
_SLOT = struct.Struct("<QQQQ64s")       # ticket, journal inode, offset, state, kind
_SLOTS_AT = 64
SLOTS = 32                              # writers in step 1-3 at once; more wait for one
_SLOTS_END = _SLOTS_AT + SLOTS * _SLOT.size
_NO_SLOTS = bytes(SLOTS * _SLOT.size)
FREE, IN_FLIGHT, DURABLE = 0, 1, 2
_LOCK_SIZE = 4096
_WAIT_FIRST = 0.00005                   # the first sleep of a writer waiting for a free
_WAIT_MOST = 0.0005                     # slot or a compaction, doubled up to _WAIT_MOST


_pid = os.getpid()          # a writer's identity (Feed._reserve) without a syscall per write


def _forked():
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


class FeedGone(StoreError):
    """The revision asked for is outside the feed's window (older than its oldest entry,
    or newer than its newest): the reader must do a full resync."""

    def __init__(self, after, oldest, last):
        super().__init__(f"revision {after} is outside the change feed's window "
                         f"({oldest - 1}..{last}): read the resources again, then follow "
                         f"from revision {last}")
        self.after = after
        self.oldest = oldest
        self.last = last


# ---- who wrote: the origin of a write --------------------------------------------------

_origin_source = None


def set_origin_source(source):
    """`source() -> (request_id, actor or None, action or None)`: the API installs it (request_context),
    so that the store, which must not import the API, names the request behind a write.
    Returns the source it replaces (a test puts it back)."""
    global _origin_source
    previous, _origin_source = _origin_source, source
    return previous


@functools.lru_cache(maxsize=1)
def _process_name():
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name.rsplit(".", 1)[-1]
    return os.path.basename(sys.argv[0] or "") or None


_process_actor = {"type": "platform", "id": None, "name": None, "project_id": None}


def set_process_actor(name):
    """The actor of the writes of this process outside any request (a daemon's name)."""
    _process_actor["name"] = name


def origin():
    """(request id, actor, action) of the write the current thread is making; outside a
    request the actor is this process (the platform, under its daemon's name)."""
    request_id, actor, action = (None, None, None)
    if _origin_source is not None:
        request_id, actor, action = _origin_source()
    if actor is None:
        actor = dict(_process_actor)
        if actor["name"] is None:
            actor["name"] = _process_name()
    return request_id, actor, action


# ---- the entries of one journal line ----------------------------------------------------

def _project(record):
    project = record.get("project_id")
    if project is None and isinstance(record.get("project"), str):
        project = record["project"].rsplit("/", 1)[-1] or None
    return project


def describe(kind, entry, table, at, who):
    """(entries without seq, note) for a journal entry about to be applied to `table`
    (uuid -> the records before it). The note is what the journal line carries so that
    the entries can be made again from the line alone (`expand`): what the line itself
    does not hold (the time, the origin, what a delete or an update replaced)."""
    request_id, actor, action = who
    actor = {k: v for k, v in actor.items() if v is not None}
    replaced = []
    for uuid in entry.get("del") or ():
        old = table.get(uuid)
        replaced.append(None if old is None else
                        [old.get("revision"), _name(old), _project(old), old.get("status")])
    for record in entry.get("put") or ():
        old = table.get(record["uuid"])
        replaced.append(None if old is None else [old.get("status")])
    note = [at, request_id, actor, action, replaced]
    return expand(kind, entry, note), note


def expand(kind, entry, note, first_seq=None):
    """The feed entries of a journal entry and its note (see describe)."""
    at, request_id, actor, action, replaced = note
    actor = {"type": None, "id": None, "name": None, "project_id": None, **actor}
    common = {"at": at, "request_id": request_id, "actor": actor, "action": action}
    made = []
    olds = iter(replaced)
    for uuid in entry.get("del") or ():
        old = next(olds)
        if old is not None:
            revision, name, project, status = old
            made.append({"kind": kind, "uuid": uuid, "op": "delete", "revision": revision,
                         "name": name, "project_id": project, "old_status": status,
                         "status": None, "status_reason": None, **common})
    for record in entry.get("put") or ():
        old = next(olds)
        made.append({"kind": kind, "uuid": record["uuid"],
                     "op": "create" if old is None else "update",
                     "revision": record.get("revision"), "name": _name(record),
                     "project_id": _project(record),
                     "old_status": old[0] if old is not None else None,
                     "status": record.get("status"),
                     "status_reason": record.get("status_reason"), **common})
    if first_seq is not None:
        for i, item in enumerate(made):
            item["seq"] = first_seq + i
    return made


def _name(record):
    name = record.get("name")
    if not isinstance(name, str):
        name = record.get("username")       # a user's name
    return name if isinstance(name, str) else None


# ---- the feed ----------------------------------------------------------------------------

class _Page:
    """The feed lock file's first page, read and changed under the feed lock and written
    back in one pwrite (a writer killed during it leaves the old page or the new one)."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = bytearray(raw)
        if _TICKETS.unpack_from(self.raw, _TICKETS_AT)[0] != _FORMAT:
            # a feed of the first format: its lines were numbered by their first seq, all
            # of them published, and its pending record is resolved (or lost with an
            # upgrade across a crash)
            last = _HEAD.unpack_from(self.raw, 0)[0]
            _TICKETS.pack_into(self.raw, _TICKETS_AT, _FORMAT, last, last + 1)
            _USED.pack_into(self.raw, _USED_AT, 0)
            _U64.pack_into(self.raw, _RESERVER_AT, 0)
            self.raw[_SLOTS_AT:_SLOTS_END] = _NO_SLOTS

    @property
    def head(self):
        return _HEAD.unpack_from(self.raw, 0)

    def set_head(self, last, first, size):
        _HEAD.pack_into(self.raw, 0, last, first, size)

    @property
    def tickets(self):
        """(last published ticket, next ticket)"""
        return _TICKETS.unpack_from(self.raw, _TICKETS_AT)[1:]

    def set_tickets(self, published, following):
        _TICKETS.pack_into(self.raw, _TICKETS_AT, _FORMAT, published, following)

    def slots(self):
        """[(index, ticket, inode, offset, state, kind)] of the slots in use, by ticket."""
        mask = _USED.unpack_from(self.raw, _USED_AT)[0]
        used = []
        while mask:
            i = (mask & -mask).bit_length() - 1
            mask &= mask - 1
            ticket, ino, offset, state, kind = _SLOT.unpack_from(self.raw,
                                                                  _SLOTS_AT + i * _SLOT.size)
            used.append((i, ticket, ino, offset, state, kind.rstrip(b"\0").decode()))
        if len(used) > 1:
            used.sort(key=lambda s: s[1])
        return used

    @property
    def in_use(self):
        return _USED.unpack_from(self.raw, _USED_AT)[0] != 0

    @property
    def reserver(self):
        return _U64.unpack_from(self.raw, _RESERVER_AT)[0]

    def set_reserver(self, writer):
        _U64.pack_into(self.raw, _RESERVER_AT, writer)

    def state(self, index):
        return _SLOT.unpack_from(self.raw, _SLOTS_AT + index * _SLOT.size)[3]

    def set_slot(self, index, ticket=0, ino=0, offset=0, state=FREE, kind=""):
        _SLOT.pack_into(self.raw, _SLOTS_AT + index * _SLOT.size, ticket, ino, offset, state,
                        kind.encode())
        mask = _USED.unpack_from(self.raw, _USED_AT)[0]
        mask = (mask | 1 << index) if state != FREE else (mask & ~(1 << index))
        _USED.pack_into(self.raw, _USED_AT, mask)

    def set_state(self, index, state):
        ticket, ino, offset, _, kind = _SLOT.unpack_from(self.raw,
                                                         _SLOTS_AT + index * _SLOT.size)
        _SLOT.pack_into(self.raw, _SLOTS_AT + index * _SLOT.size, ticket, ino, offset, state,
                        kind)

    def clear_slots(self):
        _USED.pack_into(self.raw, _USED_AT, 0)
        self.raw[_SLOTS_AT:_SLOTS_END] = _NO_SLOTS


class Feed:
    def __init__(self, directory):
        self.directory = os.path.join(directory, FEED_DIR)
        self.state_dir = directory
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self.keep_entries = DEFAULT_KEEP_ENTRIES
        self.keep_seconds = DEFAULT_KEEP_SECONDS
        self._fd = os.open(os.path.join(self.directory, LOCK_NAME), os.O_RDWR | os.O_CREAT,
                           0o600)
        self._threads = threading.RLock()
        self._depth = 0
        self._view = None
        self._segment = None            # (first seq, fd) of the segment this process appends to
        self._boot_checked = False
        self._slot_fds = {}             # slot index -> this process's fd of its liveness lock
        self._held = set()              # slots this process's threads hold (same fd: flock
                                        # cannot tell them apart)
        self._locked_page = None        # the page as read or written under the lock held

    def configure(self, keep_entries=None, keep_seconds=None):
        if keep_entries is not None:
            self.keep_entries = max(1, int(keep_entries))
        if keep_seconds is not None:
            self.keep_seconds = float(keep_seconds)

    def close(self):
        with self._threads:
            if self._segment is not None:
                os.close(self._segment[1])
                self._segment = None
            view, self._view = self._view, None
            if view is not None:
                try:
                    view.close()
                except BufferError:
                    pass
            for fd in self._slot_fds.values():
                os.close(fd)
            self._slot_fds = {}
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # ---- the counter ------------------------------------------------------------------

    def _mapped(self):
        view = self._view
        if view is None:
            if os.fstat(self._fd).st_size < _LOCK_SIZE:
                return None
            view = self._view = mmap.mmap(self._fd, _SLOTS_AT, prot=mmap.PROT_READ)
        return view

    def last(self):
        """The newest committed sequence number (0 before the first write): one read of
        a shared mapping, no syscall once mapped."""
        view = self._mapped()
        if view is None:
            return _U64.unpack(os.pread(self._fd, 8, 0).ljust(8, b"\0"))[0]
        return _U64.unpack_from(view, 0)[0]

    def _published(self):
        """The last published ticket, as last() reads the counter."""
        view = self._mapped()
        raw = view[:_SLOTS_AT] if view is not None else self._head()
        mark, published, _ = _TICKETS.unpack_from(raw, _TICKETS_AT)
        return published if mark == _FORMAT else 0

    # ---- the feed lock ----------------------------------------------------------------

    def __enter__(self):
        self._threads.acquire()
        if self._depth == 0:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                self._recover()
            except BaseException:
                self._locked_page = None
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                self._threads.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            self._locked_page = None
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def _head(self):
        raw = os.pread(self._fd, _LOCK_SIZE, 0)
        if len(raw) < _LOCK_SIZE:
            os.ftruncate(self._fd, _LOCK_SIZE)
            raw = os.pread(self._fd, _LOCK_SIZE, 0)
        return raw

    def _page(self):
        """(feed lock held) Read once per holding of the lock: only its holder writes it."""
        page = self._locked_page
        if page is None:
            page = self._locked_page = _Page(self._head())
        return page

    def _write_page(self, page):
        """(feed lock held)"""
        os.pwrite(self._fd, page.raw, 0)
        self._locked_page = page

    # ---- writing (called by Collection._write under the kind's lock) --------------------

    def commit(self, kind, ino, offset, make, write):
        """A write's journal line, numbered in the feed. `make(ticket) -> (line, entries)`
        (called under the feed lock, so that entries' times follow ticket order; no
        entries: the line is written without a ticket); `write(line) -> fsync seconds`
        appends the line at `offset` of the journal (inode `ino`) and fdatasyncs it,
        outside the feed lock. Returns (line, fsync seconds) once the entries are
        published (readable)."""
        index, ticket, line, entries, alone = self._reserve(kind, ino, offset, make)
        if index is None:
            return line, write(line)
        try:
            try:
                seconds = write(line)
            except BaseException:
                try:
                    self._abandon(index)
                except Exception:
                    pass        # the slot stays in flight, its writer then gone: resolved
                raise           # by the next writer waiting behind it
            if alone:
                # the lock was held all along and this slot is the only one: published
                # at once (what _settle and _publish would do, without their walk)
                page = self._page()
                page.set_slot(index)
                self._append(page, entries)
                page.set_tickets(ticket, page.tickets[1])
                self._write_page(page)
            else:
                self._settle(index, ticket, entries)
        finally:
            if alone:
                self.__exit__(None, None, None)
            else:
                self._release_slot(index)
        return line, seconds

    def _reserve(self, kind, ino, offset, make):
        """Step 1: (slot, ticket, line, entries, alone); slot None when the line has no
        entries. alone: this writer took the last ticket too and no slot is in use, so it
        keeps the feed lock across its fdatasync (no other writer can see its slot in
        flight, so the slot needs no liveness lock), as a single writer's second lock
        section, two flocks and a page read cost more than the parallelism it would give
        to nobody. Another writer that took the lock in between, or one inside, makes
        the next one take the two sections."""
        delay = _WAIT_FIRST
        me = hash((_pid, threading.get_ident())) & 0x7FFFFFFFFFFFFFFF | 1
        while True:
            with self:
                page = self._page()
                alone = page.reserver == me and not page.in_use
                index = self._take_slot(page, liveness=not alone)
                if index is not None:
                    published, ticket = page.tickets
                    try:
                        line, entries = make(ticket)
                    except BaseException:
                        if not alone:
                            self._release_slot(index)
                        raise
                    if not entries:
                        if not alone:
                            self._release_slot(index)
                        return None, None, line, entries, False
                    page.set_slot(index, ticket, ino, offset, IN_FLIGHT, kind)
                    page.set_tickets(published, ticket + 1)
                    page.set_reserver(me)
                    self._write_page(page)
                    if alone:
                        self.__enter__()        # held on past this block, to commit's end
                    return index, ticket, line, entries, alone
                # every slot in use: free the ones whose writers are gone, else wait
                if self._resolve_dead(page):
                    self._publish(page, {})
                    continue
            time.sleep(delay)
            delay = min(2 * delay, _WAIT_MOST)

    def _take_slot(self, page, liveness=True):
        """(feed lock held) A free slot whose liveness lock this process now holds, or
        None. A free slot can still be locked by a writer that was published by another
        and has not woken yet: skipped. liveness=False: any free slot, no lock taken."""
        for index in range(SLOTS):
            if index in self._held or page.state(index) != FREE:
                continue
            if not liveness:
                return index
            fd = self._slot_fd(index)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            self._held.add(index)
            return index
        return None

    def _release_slot(self, index):
        # unlocked before it is forgotten: a thread of this process that took it in
        # between would lock the same open file, and lose the lock to this unlock
        fcntl.flock(self._slot_fds[index], fcntl.LOCK_UN)
        self._held.discard(index)

    def _slot_path(self, index):
        return os.path.join(self.directory, f"slot-{index}.lock")

    def _slot_fd(self, index):
        fd = self._slot_fds.get(index)
        if fd is None:
            fd = self._slot_fds[index] = os.open(self._slot_path(index),
                                                 os.O_RDWR | os.O_CREAT, 0o600)
        return fd

    def _settle(self, index, ticket, entries):
        """Step 3: the line is durable; publish, or wait until a lower ticket's writer
        publishes this one along with its own. The wait blocks on the liveness lock of
        the lowest ticket in flight: its writer lets go once published (and a writer
        that dies lets go at once: then this one resolves its slot)."""
        with self:
            page = self._page()
            page.set_state(index, DURABLE)
            self._publish(page, {ticket: entries}, changed=True)
            if page.tickets[0] >= ticket:
                return
        while self._published() < ticket:
            with self:
                page = self._page()
                if page.tickets[0] >= ticket:
                    return
                ahead = next((s for s in page.slots() if s[4] == IN_FLIGHT), None)
                if ahead is None:               # this slot was cleared (a reset)
                    return
                waiting = self._alive(ahead[0], keep=True)
                if waiting is None:             # its writer is gone
                    self._resolve(page, ahead)
                    self._publish(page, {})
                    continue
            try:
                fcntl.flock(waiting, fcntl.LOCK_SH)
            finally:
                os.close(waiting)               # and with it the shared lock

    def _abandon(self, index):
        """(step 2 failed in this process) Resolve the slot as a dead writer's."""
        with self:
            page = self._page()
            slot = next((s for s in page.slots() if s[0] == index), None)
            if slot is not None and slot[4] == IN_FLIGHT:
                self._resolve(page, slot)
                self._publish(page, {})

    def _resolve_dead(self, page):
        """(feed lock held) Resolve every slot in flight whose writer is gone (its
        liveness lock is free); True if any was. Changes `page` and writes it."""
        resolved = False
        for slot in page.slots():
            index = slot[0]
            if slot[4] != IN_FLIGHT or index in self._held:
                continue
            if self._alive(index):
                continue                # between its steps 1 and 3
            self._resolve(page, slot)
            resolved = True
        return resolved

    def _alive(self, index, keep=False):
        """(feed lock held) Whether a writer holds slot `index`'s liveness lock: tried
        through a descriptor of its own, as flock tells only open files apart. keep:
        return that descriptor (to wait on) instead of True, and None for False."""
        fd = os.open(self._slot_path(index), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if index not in self._held:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.close(fd)            # and with it the lock taken
                return None if keep else False
        except BlockingIOError:
            pass
        except BaseException:
            os.close(fd)
            raise
        if keep:
            return fd
        os.close(fd)
        return True

    def _resolve(self, page, slot):
        """(feed lock held) A slot in flight without its writer: its line complete is a
        committed write (durable once fdatasynced here), torn or absent its ticket goes."""
        index, ticket, ino, offset, state, kind = slot
        if self._line_entries(kind, ino, offset, ticket, sync=True) is None:
            page.set_slot(index)
        else:
            page.set_state(index, DURABLE)
        self._write_page(page)

    def _publish(self, page, own, changed=False):
        """(feed lock held) Number and append the entries of every durable ticket below
        the lowest one in flight, in ticket order; `own`: ticket -> entries this process
        holds already (else they are made again from the journal line). Writes `page` if
        it changed (here, or before: `changed`)."""
        batch = []
        published, following = page.tickets
        for index, ticket, ino, offset, state, kind in page.slots():
            if state != DURABLE:
                break
            entries = own.get(ticket)
            if entries is None:
                entries = self._line_entries(kind, ino, offset, ticket) or []
            batch.extend(entries)
            page.set_slot(index)
            published = max(published, ticket)
            changed = True
        if batch:
            self._append(page, batch)
        if changed:
            page.set_tickets(published, following)
            self._write_page(page)

    def _append(self, page, entries):
        """(feed lock held) Number `entries` from the counter on and append them to the
        segment; the page (counter, segment size) is written by the caller, after."""
        last, first, size = page.head
        for i, entry in enumerate(entries, last + 1):
            entry["seq"] = i
        segment_first, fd = self._current_segment(first, last + 1)
        if segment_first != first:
            size = 0
        else:
            _cut_back(fd, size)         # what a publisher killed inside appended
        data = b"".join(orjson.dumps(e) + b"\n" for e in entries)
        self.append(fd, data, size)
        page.set_head(entries[-1]["seq"], segment_first, size + len(data))

    def append(self, fd, data, offset):
        """The segment write of a publication (a test kills a writer here: the journal
        line is durable, the feed's append never happens)."""
        _pwrite_all(fd, data, offset)

    def sync(self):
        """(feed lock held) Make the current segment and the counter durable: before a
        compaction drops journal lines that hold the only durable copy of its last
        entries."""
        last, first, size = _HEAD.unpack_from(self._head(), 0)
        if first:
            fd = self._segment_fd(first)
            if fd is not None:
                os.fdatasync(fd)
        os.fdatasync(self._fd)

    def compacting(self, kind, replace):
        """(the kind's lock held) Run `replace()`, which drops the kind's journal lines,
        once no slot points into them and the entries they hold are durable in the
        segment. The slots of the kind in flight are dead writers' (the kind's lock is
        held): resolved here; durable ones wait for the lower tickets of other kinds."""
        delay = _WAIT_FIRST
        while True:
            with self:
                page = self._page()
                if any(s[5] == kind for s in page.slots()):
                    self._resolve_dead(page)
                    self._publish(page, {})
                if not any(s[5] == kind for s in page.slots()):
                    self.sync()
                    return replace()
            time.sleep(delay)
            delay = min(2 * delay, _WAIT_MOST)
    def _current_segment(self, first, seq):
        """The segment to append `seq` to: the current one, or a new one once the current
        holds a share of the window (and then the segments out of the window go)."""
        if first and seq - first < max(1, self.keep_entries // 8):
            fd = self._segment_fd(first)
            if fd is not None:
                return first, fd
        fd = os.open(self._segment_path(seq), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        if self._segment is not None:
            os.close(self._segment[1])
        self._segment = (seq, fd)
        self._prune(seq)
        return seq, fd

    def _segment_fd(self, first):
        if self._segment is not None and self._segment[0] == first:
            return self._segment[1]
        try:
            fd = os.open(self._segment_path(first), os.O_RDWR)
        except FileNotFoundError:
            return None
        if self._segment is not None:
            os.close(self._segment[1])
        self._segment = (first, fd)
        return fd

    def _segment_path(self, first):
        return os.path.join(self.directory, f"{first:020d}{SEGMENT_SUFFIX}")

    def segments(self):
        """First sequence numbers of the segments there are, oldest first."""
        return sorted(int(n[:-len(SEGMENT_SUFFIX)]) for n in os.listdir(self.directory)
                      if n.endswith(SEGMENT_SUFFIX) and n[:-len(SEGMENT_SUFFIX)].isdigit())

    def _prune(self, newest_first):
        """Drop the oldest segments while what is left still covers the window: the
        newest keep_entries entries and keep_seconds of time."""
        firsts = self.segments()
        horizon = time.time() - self.keep_seconds
        for first, following in zip(firsts, firsts[1:]):
            if following > newest_first:
                break
            entries_after = newest_first - following
            path = self._segment_path(first)
            try:
                old_enough = os.stat(path).st_mtime < horizon
            except FileNotFoundError:
                continue
            if entries_after >= self.keep_entries or old_enough:
                os.unlink(path)
            else:
                break

    def _recover(self):
        """(feed lock just taken) Publish what a writer left durable (what a publisher
        killed inside appended past the counter is cut by the next append). The first
        time after a reboot, also what a power loss left (_after_reboot)."""
        if not self._boot_checked:
            self._after_reboot()
            self._boot_checked = True
        page = self._page()
        slots = page.slots()
        if slots and slots[0][4] == DURABLE:
            self._publish(page, {})

    def _after_reboot(self):
        """(feed lock held) A power loss can leave the counter and the segment behind the
        journals, whose lines (fdatasynced: the commit) carry their tickets and notes. So
        at the first write after a reboot: cut the segment back to the counter's size,
        then publish every line with a ticket past the last published one, in ticket
        order. Before the loss, tickets were published in order and only with their lines
        durable, so these lines get the very numbers a reader saw, and the rest new ones.
        No writer survives a reboot: the slot table starts empty."""
        try:
            with open(BOOT_ID) as f:
                boot = f.read().strip()
        except OSError:
            return
        marker = os.path.join(self.directory, BOOT_FILE)
        try:
            with open(marker) as f:
                if f.read().strip() == boot:
                    return
        except FileNotFoundError:
            pass
        page = self._page()
        # a writer inside (between its steps 1 and 3) means no reboot since: the mark was
        # lost, and the counter and the slots are as the writers left them
        if not any(self._alive(slot[0]) for slot in page.slots() if slot[4] == IN_FLIGHT):
            last, first, size = page.head
            if first:
                fd = self._segment_fd(first)
                if fd is not None:
                    _cut_back(fd, size)
            published, following = page.tickets
            found = sorted(_tickets_in_journals(self.state_dir, published))
            entries = [entry for _, made in found for entry in made]
            if entries:
                self._append(page, entries)
            if found:
                published = found[-1][0]
            page.set_tickets(published, max(following, published + 1))
            page.clear_slots()
            self._write_page(page)
            self.sync()
        temp = marker + ".tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, (boot + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, marker)

    def _line_entries(self, kind, ino, offset, ticket, sync=False):
        """The feed entries (without seq) of the complete journal line of `ticket` at
        `offset` of the kind's journal (inode `ino`); None if it is not there (torn,
        absent, or another line). sync: fdatasync the journal first (a dead writer's)."""
        try:
            fd = os.open(os.path.join(self.state_dir, kind + JOURNAL_SUFFIX), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_ino != ino:
                return None
            chunks = []
            at = offset
            while True:
                chunk = os.pread(fd, 65536, at)
                if not chunk:
                    return None         # no newline: torn, never acknowledged
                end = chunk.find(b"\n")
                if end >= 0:
                    chunks.append(chunk[:end])
                    break
                chunks.append(chunk)
                at += len(chunk)
            try:
                line = orjson.loads(b"".join(chunks))
            except orjson.JSONDecodeError:
                return None
            if not isinstance(line, dict) or not isinstance(line.get("feed"), list):
                return None
            if line["feed"][0] != ticket:
                return None
            if sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        return expand(kind, line, line["feed"][1:])

    def reset(self):
        """Start a new window after the state was replaced (a restore): every reader is
        told to resync. The counter goes on, so no number means two things; the tickets
        go past every ticket of the journals now there (a restored one may come from a
        state with more), so that no reboot takes their lines for lines to publish."""
        with self:
            page = self._page()
            last = page.head[0]
            for first in self.segments():
                try:
                    os.unlink(self._segment_path(first))
                except FileNotFoundError:
                    pass
            if self._segment is not None:
                os.close(self._segment[1])
                self._segment = None
            fd = os.open(self._segment_path(last + 1), os.O_RDWR | os.O_CREAT | os.O_TRUNC,
                         0o600)
            self._segment = (last + 1, fd)
            published, following = page.tickets
            newest = max([following - 1] + [t for t, _ in
                                            _tickets_in_journals(self.state_dir, 0)])
            page.set_head(last, last + 1, 0)
            page.set_tickets(newest, newest + 1)
            page.clear_slots()
            self._write_page(page)

    # ---- reading ----------------------------------------------------------------------

    def oldest(self):
        """The oldest sequence number still in the window (last + 1 when it is empty)."""
        firsts = self.segments()
        return firsts[0] if firsts else self.last() + 1

    def read(self, after, limit=None):
        """Every entry with seq > after, oldest first (at most `limit`); FeedGone when
        entries after `after` have left the window, or `after` is newer than the feed."""
        return self.cursor(after).read(limit)

    def cursor(self, after):
        return FeedCursor(self, after)

    def after_time(self, moment):
        """The revision just before the first entry at or after `moment` (an RFC 3339
        string, as the entries' `at`): what a reader asking "since this time" starts from."""
        cursor = self.cursor(self.oldest() - 1)
        while True:
            batch = cursor.read(1000)
            if not batch:
                return cursor.after
            for entry in batch:
                if entry["at"] >= moment:
                    return entry["seq"] - 1


class FeedCursor:
    """A reader's place in the feed: reads only what was appended since (the segment and
    the byte offset it stopped at)."""

    def __init__(self, feed, after):
        self.feed = feed
        self.after = int(after)
        self._first = None
        self._offset = 0
        last = feed.last()
        if self.after > last:
            raise FeedGone(self.after, feed.oldest(), last)
        self._locate()

    def _locate(self):
        firsts = self.feed.segments()
        last = self.feed.last()
        if self.after >= last and (not firsts or firsts[0] <= self.after + 1):
            self._first = firsts[-1] if firsts else None
            self._offset = None          # found by seq on the first read
            return
        if not firsts or firsts[0] > self.after + 1:
            raise FeedGone(self.after, firsts[0] if firsts else last + 1, last)
        self._first = max(f for f in firsts if f <= self.after + 1)
        self._offset = 0

    def read(self, limit=None):
        last = self.feed.last()
        if last <= self.after:
            return []
        out = []
        while self.after < last and (limit is None or len(out) < limit):
            if self._first is None:
                self._locate()
            path = self.feed._segment_path(self._first)
            try:
                with open(path, "rb") as f:
                    fresh = self._offset is None
                    f.seek(0 if fresh else self._offset)
                    data = f.read()
                if fresh:
                    self._offset = _past(data, self.after)
                    data = data[self._offset:]
            except FileNotFoundError:
                raise FeedGone(self.after, self.feed.oldest(), last) from None
            end = data.rfind(b"\n") + 1
            moved = False
            for line in data[:end].split(b"\n")[:-1] if end else ():
                entry = orjson.loads(line)
                if entry["seq"] > last:
                    break
                self._offset += len(line) + 1
                moved = True
                if entry["seq"] <= self.after:
                    continue
                if entry["seq"] != self.after + 1:
                    raise StoreError(f"change feed: entry {entry['seq']} follows "
                                     f"{self.after}")
                out.append(entry)
                self.after = entry["seq"]
                if limit is not None and len(out) >= limit:
                    return out
            if self.after >= last:
                break
            following = [f for f in self.feed.segments() if f > self._first]
            if following and following[0] <= self.after + 1:
                self._first, self._offset = following[0], 0
            elif not moved:
                if self._first not in self.feed.segments():
                    raise FeedGone(self.after, self.feed.oldest(), last)
                break       # a writer moved the counter before its line is visible: later
        return out


def _past(data, after):
    """The offset just past the last complete line of `data` whose seq is <= `after` (0:
    none), found from the end: a cursor placed at the feed's end (every new event stream)
    parses the lines after it, not the whole segment before it. The lines are in seq
    order, as `read` requires."""
    pos = data.rfind(b"\n") + 1
    while pos > 0:
        start = data.rfind(b"\n", 0, pos - 1) + 1
        if orjson.loads(data[start:pos - 1])["seq"] <= after:
            return pos
        pos = start
    return 0


def _tickets_in_journals(state_dir, after):
    """[(ticket, entries without seq)] of the complete journal lines of every kind with
    a ticket past `after`."""
    found = []
    for name in sorted(os.listdir(state_dir)):
        if not name.endswith(JOURNAL_SUFFIX):
            continue
        try:
            with open(os.path.join(state_dir, name), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        kind = name[:-len(JOURNAL_SUFFIX)]
        for line in data.split(b"\n")[1:-1]:        # the header, and a last line not ended
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            note = entry.get("feed") if isinstance(entry, dict) else None
            if isinstance(note, list) and note and note[0] > after:
                found.append((note[0], expand(kind, entry, note[1:])))
    return found


def _cut_back(fd, size):
    """Cut a segment back to the counter's `size`: what lies past it the counter does not
    count (a publisher killed inside its append, a power loss that kept the segment's
    bytes and not the counter's), and the next append writes from `size` on."""
    if os.fstat(fd).st_size > size:
        os.ftruncate(fd, size)


def _pwrite_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
