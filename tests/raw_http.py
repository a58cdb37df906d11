"""GETs held open on a bare socket, for the tests and benches of long-lived connections
(payload long polls, event streams): they hold hundreds at once and read them side by side,
which a client library would do with a thread or a pooled connection each."""

import selectors
import socket
import time


def opened(port, path, token, accept="application/json", timeout=30, host="127.0.0.1",
           wrap=None):
    """A socket to 127.0.0.1:`port` that has sent GET `path` with `token` (`wrap`, e.g. a
    TLS context's wrap_socket, applied to it first)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if wrap is not None:
        sock = wrap(sock)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}"
                 f"\r\nAccept: {accept}\r\n\r\n".encode())
    return sock


def read_until(sock, done, timeout=30):
    """One socket's bytes once done(bytes so far) holds, it closes, or `timeout` s pass."""
    seen = b""
    deadline = time.monotonic() + timeout
    sock.settimeout(1)
    while time.monotonic() < deadline and not done(seen):
        try:
            data = sock.recv(65536)
        except (TimeoutError, socket.timeout):
            continue
        if not data:
            break
        seen += data
    return seen


def read_all(socks, done, timeout):
    """Read every socket until done(its bytes so far) holds or it closes, for `timeout` s
    at most: ({socket: its bytes}, the sockets still reading when the time ran out)."""
    got = {s: b"" for s in socks}
    left = set(socks)
    selector = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for key, _ in selector.select(0.5):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            got[s] += data
            if not data or done(got[s]):
                left.discard(s)
                selector.unregister(s)
    selector.close()
    return got, left
