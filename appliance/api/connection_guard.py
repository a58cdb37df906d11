"""Waitress against connection floods (issue 25): what keeps a fresh request answered
while one client holds a thousand connections open.

Waitress stops accepting once `connection_limit` connections are open, and closes one
only after `channel_timeout` of silence. A client that trickles a header line every 5 s is
never silent, and an idle keep-alive connection waits out the whole timeout: 1,000 of
either kept a fresh request in the listen backlog for 31-60 s. Three rules here, each
costing nothing to a client that sends its request and reads its answer:

- A request's header must be complete `header_timeout` seconds after its first byte, and
  a connection with no request in hand (fresh, or kept alive after an answer) is closed
  after `idle_timeout`: a trickle is no longer "activity".
- One address holds at most `per_address` connections. Past it, the connection of that
  address that has waited longest without a complete request (idle or trickling) is
  closed to make room; when every one of them has a request in hand, the new one is
  answered 429 and closed. A flood from one address thus only ever displaces its own
  connections, and a normal request from the same address still gets in.
- At the overall `connection_limit`, the same choice is made across addresses (from the
  address holding the most connections) instead of no longer accepting: the server
  accepts as long as some connection is only waiting.

A connection with a request in hand (in a worker, its answer being sent, its body
arriving) is never closed by these rules; Waitress's own `channel_timeout` still bounds
its silences.

The rules are a mix-in of the server and of its channel class, applied to the server
that `waitress.create_server` made (`guard`), so that Waitress's own choice of server
class and the JSON error channel (server_errors.json_errors) stay as they are.
"""

import json
import threading
import time

from .waitress_mixins import mix_into

# the answer to a connection refused by the per-address cap: the request is not read, so
# the connection closes after it
_REFUSAL_BODY = json.dumps({
    "type": "TooManyRequests", "code": 429,
    "message": "too many connections from this address: close idle ones, or retry after "
               "the time in Retry-After"}).encode()
REFUSAL = (b"HTTP/1.1 429 Too Many Requests\r\n"
           b"Content-Type: application/json\r\n"
           b"Retry-After: 1\r\n"
           b"Connection: close\r\n"
           b"Content-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n"
           + _REFUSAL_BODY)


def guard(server, per_address, header_timeout, idle_timeout):
    """Apply the rules to a Waitress server (after json_errors, before run). `per_address`
    0 turns the per-address cap off (the image: nginx in front is the only address)."""
    mix_into(server, "Guarded", GuardedChannel, GuardedServer)
    server.guard_per_address = per_address
    server.guard_header_timeout = header_timeout
    server.guard_idle_timeout = idle_timeout
    server.guard_peers = {}
    server.guard_lock = threading.Lock()
    return server


def _host(addr):
    return addr[0] if isinstance(addr, tuple) else addr


class GuardedChannel:
    request_started = None          # when the first byte of the header in progress came

    def __init__(self, server, sock, addr, adj, map=None):
        super().__init__(server, sock, addr, adj, map=map)
        server.admit(self)

    def del_channel(self, map=None):
        super().del_channel(map)
        self.server.release(self)

    def received(self, data):
        if data and self.request is None:
            self.request_started = time.time()
        return super().received(data)

    def closing(self):
        return self.will_close or self.close_when_flushed

    def waiting_since(self):
        """When this connection began waiting for a request, while it has none in hand:
        since its last activity when idle, since its header's first byte while the header
        is incomplete. None while a request is in hand or the connection is closing."""
        if self.requests or self.total_outbufs_len or self.closing():
            return None
        request = self.request
        if request is None:
            return self.last_activity
        if not request.headers_finished:
            return self.request_started
        return None                  # its body is arriving: channel_timeout's

    def deadline(self):
        request = self.request
        if self.waiting_since() is None:
            return None
        if request is None:
            return self.last_activity + self.server.guard_idle_timeout
        return self.request_started + self.server.guard_header_timeout

    def refuse(self):
        with self.outbuf_lock:
            self.outbufs[-1].append(REFUSAL)
            self.current_outbuf_count += len(REFUSAL)
            self.total_outbufs_len += len(REFUSAL)
        self.close_when_flushed = True


class GuardedServer:
    def admit(self, channel):
        host = _host(channel.addr)
        with self.guard_lock:
            peers = self.guard_peers.setdefault(host, set())
            peers.add(channel)
            held = [c for c in peers if not c.closing()]
        if not self.guard_per_address or len(held) <= self.guard_per_address:
            return
        victim = _longest_waiting(c for c in held if c is not channel)
        if victim is None:
            channel.refuse()
        else:
            victim.will_close = True

    def release(self, channel):
        host = _host(channel.addr)
        with self.guard_lock:
            peers = self.guard_peers.get(host)
            if peers is not None:
                peers.discard(channel)
                if not peers:
                    del self.guard_peers[host]

    def readable(self):
        # Waitress stops accepting at the limit; first make room, so that it need not
        if self.accepting and len(self._map) >= self.adj.connection_limit:
            self._make_room(len(self._map) - self.adj.connection_limit + 1)
        return super().readable()

    def _make_room(self, needed):
        with self.guard_lock:
            groups = sorted((list(peers) for peers in self.guard_peers.values()),
                            key=len, reverse=True)
        needed -= sum(c.closing() for group in groups for c in group)
        for group in groups:
            while needed > 0:
                victim = _longest_waiting(group)
                if victim is None:
                    break
                victim.will_close = True
                needed -= 1
            if needed <= 0:
                return

    def maintenance(self, now):
        super().maintenance(now)
        for channel in list(self.active_channels.values()):
            deadline = channel.deadline()
            if deadline is not None and now >= deadline:
                channel.will_close = True


def _longest_waiting(channels):
    best, best_since = None, None
    for channel in channels:
        since = channel.waiting_since()
        if since is not None and (best_since is None or since < best_since):
            best, best_since = channel, since
    return best
