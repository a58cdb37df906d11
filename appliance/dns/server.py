"""The DNS server's sockets: a UDP loop and a TCP loop over one ZoneIndex, with a
response cache.

UDP fast path: a query is looked up by its bytes after the 2-byte ID; a hit is sent back
with the query's ID in front and nothing is parsed. On Linux the loop moves up to 64
datagrams per system call in each direction (recvmmsg/sendmmsg through ctypes), and a
cached answer is sent straight from the bytes in the cache (an iovec points into them),
so a hit costs a dict lookup and two stores into the send vector. Elsewhere, or if
ctypes cannot reach those calls, it falls back to a plain recvfrom/sendto loop.

Misses take the slow path: parse, answer from the index, cache. Names are compared
without regard to case, so a miss looks again under the query with its question name in
lower case; an answer found there is copied with the asker's spelling of the name put
back in the question (every owner name that equals the question name is a compression
pointer to it, so the whole answer echoes the asker's case, as 0x20-randomising
resolvers expect). Both keys are then cached.

Every zone change installs a new Generation (index + empty caches) with one attribute
assignment: a loop picks it up at its next datagram (UDP: its next batch), so no answer
from an older index is cached after the swap. The caches are bounded: a cache that
reaches MAX_CACHE entries is replaced by an empty one (random names or case variants
cannot grow memory without bound).

TCP (RFC 7766): length-prefixed messages, any number per connection, pipelined; answers
in order; a connection idle for TCP_IDLE_SECONDS is closed; at most TCP_MAX_CONNECTIONS
at once (a new one beyond that is closed at once).

Metrics (docs/metrics-infra.md): every cache entry carries the number of its (qtype,
rcode) labels, worked out once when the answer is made, so a hit only adds one to a slot
of a list of the loop's own; the loop hands those tallies to prometheus_client once per
batch (UDP) or per round of events (TCP), so the fast path takes no lock and parses
nothing for them.
"""

import ctypes
import errno
import logging
import selectors
import socket
import struct
import sys
import threading
import time

from appliance.metrics import Counter

from appliance.infra_metrics import COLLECTION_ERRORS

from . import zones

log = logging.getLogger("appliance.dns.server")

MAX_CACHE = 100_000
TCP_IDLE_SECONDS = 10.0
TCP_MAX_CONNECTIONS = 512
TCP_MAX_PENDING = 1 << 20       # stop reading a connection that does not read its answers
UDP_BATCH = 64                  # datagrams per recvmmsg/sendmmsg
UDP_MAX_QUERY = 4096            # a query filling this much is dropped (it may be cut)
SOCKET_BUFFER = 4 << 20


QUERIES = Counter("appliance_dns_queries", "DNS queries received, by question type (a "
                  "fixed set of names, else \"other\"; \"none\": no readable question) "
                  "and transport. Queries per second: rate() of this.",
                  ["qtype", "transport"])
ANSWERS = Counter("appliance_dns_answers", "DNS answers sent, by response code and "
                  "transport.", ["rcode", "transport"])
_QTYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 13: "HINFO", 15: "MX",
           16: "TXT", 28: "AAAA", 33: "SRV", 35: "NAPTR", 43: "DS", 48: "DNSKEY",
           64: "SVCB", 65: "HTTPS", 251: "IXFR", 252: "AXFR", 255: "ANY", 257: "CAA"}
_RCODES = {zones.NOERROR: "NOERROR", zones.FORMERR: "FORMERR", zones.SERVFAIL: "SERVFAIL",
           zones.NXDOMAIN: "NXDOMAIN", zones.NOTIMP: "NOTIMP", zones.REFUSED: "REFUSED"}


def stat_of(tail):
    """(qtype name, rcode name) of an answer without its ID: the labels it counts under.
    The names come from fixed tables, so no query can add a label value."""
    rcode = _RCODES.get(tail[1] & 0x0F, "other")
    if len(tail) < 12 or not (tail[2] or tail[3]):
        return ("none", rcode)
    i = 10                              # the question's name, right after the header
    while i < len(tail):
        n = tail[i]
        if n == 0:
            i += 1
            break
        if n & 0xC0:
            i += 2
            break
        i += 1 + n
    if i + 2 > len(tail):
        return ("none", rcode)
    return (_QTYPES.get((tail[i] << 8) | tail[i + 1], "other"), rcode)


# (qtype, rcode) pairs get small numbers in the order they are first seen, so a loop
# counts into a list by index (a tuple key would be hashed at every query)
_STAT_IDS = {}
_STAT_NAMES = []
MAX_STATS = (len(_QTYPES) + 2) * (len(_RCODES) + 2)
_stat_lock = threading.Lock()


def _stat_id(stat):
    found = _STAT_IDS.get(stat)
    if found is None:
        with _stat_lock:
            found = _STAT_IDS.get(stat)
            if found is None:
                found = len(_STAT_NAMES)
                _STAT_NAMES.append(stat)
                _STAT_IDS[stat] = found
    return found


DROPPED = _stat_id(("none", None))      # a query that gets no answer


class _Tally:
    """One serving loop's counts by stat id since its last flush; only that loop's
    thread uses it."""

    __slots__ = ("transport", "counts", "_children")

    def __init__(self, transport):
        self.transport = transport
        self.counts = [0] * MAX_STATS
        self._children = {}

    def flush(self):
        counts, self.counts = self.counts, [0] * MAX_STATS
        try:
            for i in range(len(_STAT_NAMES)):
                n = counts[i]
                if not n:
                    continue
                children = self._children.get(i)
                if children is None:
                    qtype, rcode = _STAT_NAMES[i]
                    children = (QUERIES.labels(qtype, self.transport),
                                None if rcode is None else
                                ANSWERS.labels(rcode, self.transport))
                    self._children[i] = children
                children[0].inc(n)
                if children[1] is not None:
                    children[1].inc(n)
        except Exception:
            COLLECTION_ERRORS.labels("dns").inc()


class Generation:
    """One zone index and the caches of answers computed from it."""

    __slots__ = ("index", "udp", "udp_norm", "tcp", "tcp_norm")

    def __init__(self, index):
        self.index = index
        self.udp, self.udp_norm = {}, {}
        self.tcp, self.tcp_norm = {}, {}

    def resolve(self, data, tcp=False):
        """The entry for query `data`: (answer without its ID, address of those bytes
        for the batch loop's iovec (0 without ctypes), their length), cached unless it
        is an error answer to an unreadable packet; None when the packet gets no
        answer. Never raises."""
        try:
            return self._resolve(data, tcp)
        except Exception:
            _log_rarely("answering a query failed")
            reply = zones.error_response(data, zones.SERVFAIL)
            return None if reply is None else _entry(reply[2:])

    def _resolve(self, data, tcp):
        exact, norm = (self.tcp, self.tcp_norm) if tcp else (self.udp, self.udp_norm)
        key = data[2:]
        entry = exact.get(key)
        if entry is not None:
            return entry
        try:
            query = zones.parse_query(data)
        except zones.DropQuery:
            return None
        except zones.FormatError:
            reply = zones.error_response(data, zones.FORMERR)
            return None if reply is None else _entry(reply[2:])
        if query.qname_raw is None:         # NOTIMP without a question: not worth a slot
            return _entry(self.index.answer(query, tcp)[2:])
        raw = query.qname_raw
        end = 12 + len(raw)
        lower_key = data[2:12] + query.qname + data[end:]
        template = norm.get(lower_key)
        if template is None:
            template = self.index.answer(query, tcp)[2:]
            if len(norm) >= MAX_CACHE:
                norm = self._fresh(tcp, norm=True)
            norm[lower_key] = template
        # the question sits right after the header: put the asker's spelling back
        if raw == query.qname or template[2:4] != b"\x00\x01":
            tail = template
        else:
            tail = template[:10] + raw + template[end - 2:]
        entry = _entry(tail)
        if len(exact) >= MAX_CACHE:
            exact = self._fresh(tcp, norm=False)
        exact[key] = entry
        return entry

    def _fresh(self, tcp, norm):
        name = ("tcp" if tcp else "udp") + ("_norm" if norm else "")
        fresh = {}
        setattr(self, name, fresh)
        return fresh


def _entry(tail):
    # ctypes gives the address of the bytes object's own buffer: the UDP batch loop
    # points an iovec at it, and the entry (or the batch) keeps the object alive
    address = ctypes.cast(ctypes.c_char_p(tail), ctypes.c_void_p).value if _MMSG else 0
    return (tail, address, len(tail), _stat_id(stat_of(tail)))


_last_logged = [0.0, 0]


def _log_rarely(message):
    """log.exception at most once a second (a flood of bad packets must not flood the
    log); the number left out is reported with the next one."""
    now = time.monotonic()
    if now - _last_logged[0] >= 1.0:
        suppressed = _last_logged[1]
        _last_logged[0], _last_logged[1] = now, 0
        log.exception("%s%s", message,
                      f" ({suppressed} more since the last report)" if suppressed else "")
    else:
        _last_logged[1] += 1


# ---- recvmmsg / sendmmsg through ctypes -----------------------------------------------

class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


def _load_mmsg():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.recvmmsg, libc.sendmmsg
    except (OSError, AttributeError):
        return None


_MMSG = _load_mmsg()
MSG_WAITFORONE = 0x10000


class _Batch:
    """The buffers of one UDP socket's recvmmsg/sendmmsg loop.

    Receive slot i: a UDP_MAX_QUERY-byte buffer, a sender address buffer. Send slot j:
    two iovecs, the 2-byte ID (read in place from receive buffer i) and the cached
    answer (in place in the cache's bytes object), and the sender address of slot i.
    Normally j == i; a dropped query shifts the later ones down."""

    NAME = 128

    def __init__(self, n, size, family):
        self.n, self.size = n, size
        mm = ctypes.sizeof(_MMsgHdr)
        iov = ctypes.sizeof(_IOVec)
        self.rbuf = bytearray(n * size)
        self.names = bytearray(n * self.NAME)
        self.riov = bytearray(n * iov)
        self.siov = bytearray(n * 2 * iov)
        self.rmsg = bytearray(n * mm)
        self.smsg = bytearray(n * mm)

        def address(buf):
            return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))

        self.a_rbuf, self.a_names = address(self.rbuf), address(self.names)
        a_riov, a_siov = address(self.riov), address(self.siov)
        a_rmsg, a_smsg = address(self.rmsg), address(self.smsg)
        namelen = 28 if family == socket.AF_INET6 else 16
        riovs = (_IOVec * n).from_buffer(self.riov)
        siovs = (_IOVec * (2 * n)).from_buffer(self.siov)
        rmsgs = (_MMsgHdr * n).from_buffer(self.rmsg)
        smsgs = (_MMsgHdr * n).from_buffer(self.smsg)
        for i in range(n):
            riovs[i].iov_base, riovs[i].iov_len = self.a_rbuf + i * size, size
            siovs[2 * i].iov_base, siovs[2 * i].iov_len = self.a_rbuf + i * size, 2
            r = rmsgs[i].msg_hdr
            r.msg_name, r.msg_namelen = self.a_names + i * self.NAME, self.NAME
            r.msg_iov, r.msg_iovlen = a_riov + i * iov, 1
            s = smsgs[i].msg_hdr
            s.msg_name, s.msg_namelen = self.a_names + i * self.NAME, namelen
            s.msg_iov, s.msg_iovlen = a_siov + 2 * i * iov, 2
        del riovs, siovs, rmsgs, smsgs      # ctypes views pin the bytearrays' size
        self.p_rmsg = ctypes.c_void_p(a_rmsg)
        self.p_smsg = [ctypes.c_void_p(a_smsg + j * mm) for j in range(n)]
        # fast views: msg_len of each received message, the send iovecs, send msghdrs
        self.lens = memoryview(self.rmsg).cast("I")
        self.len_stride = mm // 4
        self.len_at = _MMsgHdr.msg_len.offset // 4
        self.sptr = memoryview(self.siov).cast("P")      # iovec = (pointer, size_t)
        self.iov_words = iov // ctypes.sizeof(ctypes.c_void_p)
        self.smsg_ptr = memoryview(self.smsg).cast("P")
        self.mm_words = mm // ctypes.sizeof(ctypes.c_void_p)
        self.name_word = _MsgHdr.msg_name.offset // ctypes.sizeof(ctypes.c_void_p)
        self.rmv = memoryview(self.rbuf)


# ---- the server ----------------------------------------------------------------------

class DNSServer:
    """Serves one ZoneIndex over UDP and TCP on host:port until stop()."""

    def __init__(self, host="127.0.0.1", port=5353, index=None, batch=True,
                 on_failure=None):
        """batch=False forces the portable recvfrom/sendto loop. on_failure() is called
        (from the dying thread) if a serving loop ever stops on an unexpected error."""
        self.host, self.port = host, int(port)
        self.on_failure = on_failure
        self.family = None
        self._gen = Generation(index or zones.ZoneIndex())
        self._batch = bool(batch) and _MMSG is not None
        self._stopping = False
        self._udp = self._tcp = None
        self._threads = []
        self._wake_r = self._wake_w = None
        self.generations = 0
        self._tcp_tally = _Tally("tcp")

    # -- zone changes (any thread) ----------------------------------------------------

    def set_index(self, index):
        """Serve `index` from now on; every cached answer is dropped in the same step."""
        self._gen = Generation(index)
        self.generations += 1

    @property
    def index(self):
        return self._gen.index

    # -- lifecycle ----------------------------------------------------------------------

    def bind(self):
        """Open the UDP and TCP sockets (port 0: one free port for both)."""
        infos = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_DGRAM, 0,
                                   socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        for attempt in range(20):
            udp = socket.socket(family, socket.SOCK_DGRAM)
            tcp = socket.socket(family, socket.SOCK_STREAM)
            try:
                for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                    try:
                        udp.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
                    except OSError:
                        pass
                udp.bind(address)
                port = udp.getsockname()[1]
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                tcp.bind((address[0], port) + tuple(address[2:]))
                tcp.listen(128)
            except OSError:
                udp.close()
                tcp.close()
                if self.port == 0 and attempt < 19:
                    continue            # TCP half of a random port taken: another one
                raise
            self._udp, self._tcp, self.port = udp, tcp, port
            self.family = family
            return self

    def start(self):
        if self._udp is None:
            self.bind()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        udp_loop = self._udp_batch_loop if self._batch else self._udp_plain_loop
        for target, name in ((udp_loop, "dns-udp"), (self._tcp_loop, "dns-tcp")):
            t = threading.Thread(target=self._guard, args=(target,), name=name, daemon=True)
            t.start()
            self._threads.append(t)
        log.info("serving DNS on %s port %d, UDP (%s) and TCP", self.host, self.port,
                 "recvmmsg/sendmmsg" if self._batch else "recvfrom/sendto")
        return self

    def stop(self, timeout=2.0):
        self._stopping = True
        if self._wake_w is not None:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
        if self._udp is not None:
            self._poke_udp()
        for t in self._threads:
            t.join(timeout)
        for s in (self._udp, self._tcp, self._wake_r, self._wake_w):
            if s is not None:
                s.close()
        self._threads = []

    def _poke_udp(self):
        """Wake the UDP thread out of its blocking receive: shutdown() does on Linux;
        an empty datagram to ourselves does everywhere."""
        try:
            self._udp.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        try:
            host, port = self._udp.getsockname()[:2]
            if host in ("0.0.0.0", "::", ""):
                host = "::1" if self.family == socket.AF_INET6 else "127.0.0.1"
            with socket.socket(self.family, socket.SOCK_DGRAM) as s:
                s.sendto(b"", (host, port))
        except OSError:
            pass

    def _guard(self, loop):
        try:
            loop()
        except Exception:
            if not self._stopping:
                log.exception("%s stopped", threading.current_thread().name)
                if self.on_failure is not None:
                    self.on_failure()

    # -- UDP ----------------------------------------------------------------------------

    def _udp_plain_loop(self):
        sock = self._udp
        recvfrom, sendto = sock.recvfrom, sock.sendto
        tally = _Tally("udp")
        while not self._stopping:
            try:
                data, addr = recvfrom(65535)
            except OSError as e:
                if self._stopping:
                    return
                if e.errno in (errno.EINTR, errno.EAGAIN, errno.ECONNREFUSED):
                    continue
                raise
            gen = self._gen
            entry = gen.udp.get(data[2:])
            if entry is None:
                entry = gen.resolve(data)
                if entry is None:
                    tally.counts[DROPPED] += 1
                    tally.flush()
                    continue
            try:
                sendto(data[:2] + entry[0], addr)
            except OSError:
                pass        # a vanished client, a full buffer: UDP, the client retries
            tally.counts[entry[3]] += 1
            tally.flush()

    def _udp_batch_loop(self):
        recvmmsg, sendmmsg = _MMSG
        b = _Batch(UDP_BATCH, UDP_MAX_QUERY, self.family)
        fd = self._udp.fileno()
        n_max, size, p_rmsg, p_smsg = b.n, b.size, b.p_rmsg, b.p_smsg
        lens, rmv, sptr = b.lens, b.rmv, b.sptr
        # per receive slot: buffer offset, offset after the ID, index of its msg_len,
        # indexes (pointer words) of the answer iovec's base and length
        slots = [(i * size, i * size + 2, i * b.len_stride + b.len_at,
                  (2 * i + 1) * b.iov_words, (2 * i + 1) * b.iov_words + 1)
                 for i in range(n_max)]
        get_errno = ctypes.get_errno
        tally = _Tally("udp")
        while not self._stopping:
            n = recvmmsg(fd, p_rmsg, n_max, MSG_WAITFORONE, None)
            if n <= 0:
                if self._stopping:
                    return
                code = get_errno()
                if n < 0 and code not in (errno.EINTR, errno.EAGAIN, errno.ECONNREFUSED):
                    raise OSError(code, "recvmmsg failed")
                continue
            gen = self._gen
            get = gen.udp.get
            keep = None         # answers outside the cache, alive until sent
            counts = tally.counts
            j = 0
            for i in range(n):
                off, off2, li, base_at, len_at = slots[i]
                length = lens[li]
                entry = get(rmv[off2:off + length].tobytes())
                if entry is None:
                    if length >= size:
                        counts[DROPPED] += 1
                        continue        # may have been cut: drop
                    entry = gen.resolve(rmv[off:off + length].tobytes())
                    if entry is None:
                        counts[DROPPED] += 1
                        continue
                    if keep is None:
                        keep = []
                    keep.append(entry)
                if j != i:
                    self._move_slot(b, i, j)
                    base_at, len_at = slots[j][3], slots[j][4]
                sptr[base_at] = entry[1]
                sptr[len_at] = entry[2]
                counts[entry[3]] += 1
                j += 1
            sent = 0
            while sent < j:
                r = sendmmsg(fd, p_smsg[sent], j - sent, 0)
                if r > 0:
                    sent += r
                elif get_errno() != errno.EINTR:
                    sent += 1       # the first of the rest failed: skip it
            if j != n:
                self._reset_slots(b, n)
            del keep
            tally.flush()

    @staticmethod
    def _move_slot(b, i, j):
        """Send slot j answers receive slot i: its ID and its sender's address."""
        b.sptr[2 * j * b.iov_words] = b.a_rbuf + i * b.size
        b.smsg_ptr[j * b.mm_words + b.name_word] = b.a_names + i * _Batch.NAME

    @staticmethod
    def _reset_slots(b, n):
        for j in range(n):
            DNSServer._move_slot(b, j, j)

    # -- TCP ----------------------------------------------------------------------------

    def _tcp_loop(self):
        listener = self._tcp
        listener.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        conns = {}
        try:
            while not self._stopping:
                events = sel.select(min(1.0, TCP_IDLE_SECONDS / 4))
                now = time.monotonic()
                for key, mask in events:
                    if key.data is None:
                        self._tcp_accept(listener, sel, conns, now)
                    elif key.data == "wake":
                        return
                    else:
                        conn = key.data
                        conn.last = now
                        if mask & selectors.EVENT_READ:
                            conn.read(self)
                        if mask & selectors.EVENT_WRITE or conn.out:
                            conn.flush()
                        if conn.closed:
                            self._tcp_drop(sel, conns, conn)
                        else:
                            conn.rearm(sel)
                for conn in [c for c in conns.values() if now - c.last > TCP_IDLE_SECONDS]:
                    self._tcp_drop(sel, conns, conn)
                self._tcp_tally.flush()
        finally:
            for conn in list(conns.values()):
                self._tcp_drop(sel, conns, conn)
            sel.close()

    def _tcp_accept(self, listener, sel, conns, now):
        for _ in range(64):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return          # e.g. EMFILE; the next event retries
            if len(conns) >= TCP_MAX_CONNECTIONS:
                sock.close()
                continue
            sock.setblocking(False)
            conn = _TCPConn(sock, now)
            conns[sock.fileno()] = conn
            sel.register(sock, selectors.EVENT_READ, conn)

    @staticmethod
    def _tcp_drop(sel, conns, conn):
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conns.pop(conn.fd, None)
        conn.sock.close()

    def answer_tcp(self, message):
        """The answer to one TCP message (without its length prefix), or None."""
        entry = self._gen.resolve(message, tcp=True)
        self._tcp_tally.counts[DROPPED if entry is None else entry[3]] += 1
        return None if entry is None else message[:2] + entry[0]


class _TCPConn:
    __slots__ = ("sock", "fd", "inbuf", "out", "last", "closed", "events")

    def __init__(self, sock, now):
        self.sock, self.fd = sock, sock.fileno()
        self.inbuf = bytearray()
        self.out = bytearray()
        self.last = now
        self.closed = False
        self.events = selectors.EVENT_READ

    def read(self, server):
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.closed = True
            return
        if not data:
            self.closed = True          # the client is done; answers still owed are lost
            return
        buf = self.inbuf
        buf += data
        while len(buf) >= 2:
            length = (buf[0] << 8) | buf[1]
            if len(buf) < 2 + length:
                break
            message = bytes(buf[2:2 + length])
            del buf[:2 + length]
            answer = server.answer_tcp(message)
            if answer is None:
                if length < 12:
                    self.closed = True  # garbage framing: nothing more can be trusted
                    return
                continue
            self.out += struct.pack("!H", len(answer)) + answer

    def flush(self):
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.closed = True
                return
            del self.out[:sent]

    def rearm(self, sel):
        events = 0
        if len(self.out) < TCP_MAX_PENDING:
            events |= selectors.EVENT_READ
        if self.out:
            events |= selectors.EVENT_WRITE
        if events != self.events:
            self.events = events
            sel.modify(self.sock, events, self)
