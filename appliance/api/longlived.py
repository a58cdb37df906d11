"""Long-lived connections (agent long polls, event streams) on an event loop, so that
their number costs no Waitress thread (issue 29; docs/long-lived.md).

Why a hand-over and not a second server: the request is read, authenticated, authorized,
validated and audited by the one path every route takes (Waitress, the Middleware,
Api._wrap); only the *waiting* moves. A route that would wait returns a `Parked` reply.
On a Waitress server made with `install`, the worker thread then captures the response
head Waitress would have sent (so X-Request-Id and the other headers of the ordinary path
stay), hands a duplicate of the connection's socket to the API's asyncio loop, and drops
the connection from Waitress: the thread is free at once, and the connection lives on in
the loop, which writes the answer when a store change (state/watch.py, state/feed.py)
wakes it, and then closes the connection (`Connection: close`).

Where no hand-over is installed (a WSGI server of another kind), the same coroutine runs
on the same loop and the request's thread relays what it writes (`_relay`): one
implementation of each wait, two transports.
"""

import asyncio
import json
import logging
import queue
import threading

from .errors import ApiError
from .waitress_mixins import mix_into

log = logging.getLogger("appliance.longlived")

_current = threading.local()        # the Waitress channel a worker thread is serving
# response headers that the loop decides itself (it writes the body, then closes)
_OWN_HEADERS = {b"content-length", b"content-type", b"transfer-encoding", b"connection"}
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 409: "Conflict", 500: "Internal Server Error",
            503: "Service Unavailable"}


class Parked:
    """A reply finished on the event loop. `serve(exchange)` is a coroutine function:
    it calls `await exchange.head(...)` once, then `await exchange.write(...)` (or
    `await exchange.answer(...)` once, head and body in one send), and
    watches `exchange.gone` (the client closed). An ApiError raised before the head
    becomes the conventions' error body."""

    def __init__(self, serve):
        self.serve = serve


class EventLoop:
    """The API process's asyncio loop, in one daemon thread, started on first use."""

    def __init__(self):
        self._loop = None
        self._thread = None
        self._lock = threading.Lock()

    @property
    def loop(self):
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever,
                                                daemon=True, name="api-longlived")
                self._thread.start()
            return self._loop

    def running(self):
        return self._loop is not None

    def submit(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call_soon(self, callback, *args):
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:           # closed between the check and the call
                pass

    def stop(self, drain=1.0, timeout=2.0):
        """After the hubs' stop: their waits answer (a stream sends its `end` event)
        within `drain` seconds; what is still running then is cancelled."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None        # a second stop does nothing
        if loop is None:
            return

        async def cancel_all():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if tasks:
                await asyncio.wait(tasks, timeout=drain)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(drain + timeout)
        except Exception:              # noqa: BLE001 (stopping: what is left is dropped)
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)


# ---- the two transports ---------------------------------------------------------------

class _Exchange:
    def __init__(self):
        self.gone = asyncio.Event()
        self.started = False

    async def reply_error(self, error):
        await self.answer(error.status, error.headers, "application/json",
                          json.dumps(error.body()).encode())

    async def answer(self, status, headers, content_type, body):
        """The whole reply at once (head and body)."""
        await self.head(status, headers, content_type)
        await self.write(body)


class SocketExchange(_Exchange):
    """The connection itself, taken over from Waitress."""

    def __init__(self, writer, captured):
        super().__init__()
        self.writer = writer
        self.captured = captured

    async def head(self, status, headers, content_type):
        self.writer.write(self._head(status, headers, content_type))
        await self.writer.drain()

    async def answer(self, status, headers, content_type, body):
        # one send for head and body: a fan-out answers a thousand of these at once
        self.writer.write(self._head(status, headers, content_type) + body)
        await self.writer.drain()

    def _head(self, status, headers, content_type):
        self.started = True
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}".encode()]
        # what the ordinary path put in the head (X-Request-Id, Date, Server, ...)
        for line in self.captured.split(b"\r\n")[1:]:
            name = line.split(b":", 1)[0].strip().lower()
            if line and name not in _OWN_HEADERS and \
                    name.decode("latin-1") not in {k.lower() for k in headers}:
                lines.append(line)
        lines += [f"{k}: {v}".encode("latin-1") for k, v in headers.items()]
        lines += [f"Content-Type: {content_type}".encode(), b"Connection: close"]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def write(self, data):
        self.writer.write(data)
        await self.writer.drain()


class RelayExchange(_Exchange):
    """A request thread relays what the loop writes (no hand-over installed)."""

    def __init__(self, outbox):
        super().__init__()
        self.outbox = outbox

    async def head(self, status, headers, content_type):
        self.started = True
        self.outbox.put(("head", (status, headers, content_type)))

    async def write(self, data):
        self.outbox.put(("data", data))


async def _run(parked, exchange):
    try:
        await parked.serve(exchange)
    except ApiError as error:
        if not exchange.started:
            await exchange.reply_error(error)
    except ConnectionError:         # the client left while we wrote
        pass
    except Exception:               # noqa: BLE001 (logged; the client gets an error)
        log.exception("long-lived reply failed")
        if not exchange.started:
            await exchange.reply_error(ApiError("internal error; see the API log"))


class GoneExchange(_Exchange):
    """A connection that could not be taken over: the reply's coroutine still runs (its
    counts are given back), sees its client gone, and writes nothing."""

    def __init__(self):
        super().__init__()
        self.gone.set()

    async def head(self, status, headers, content_type):
        self.started = True

    async def write(self, data):
        pass


async def _serve_socket(sock, captured, parked):
    try:
        reader, writer = await asyncio.open_connection(sock=sock)
    except OSError:
        sock.close()
        await _run(parked, GoneExchange())
        return
    exchange = SocketExchange(writer, captured)

    async def watch_close():
        # the client sends nothing more (Connection: close): any read's end is its close
        try:
            while await reader.read(4096):
                pass
        except ConnectionError:
            pass
        exchange.gone.set()
    watcher = asyncio.ensure_future(watch_close())
    try:
        await _run(parked, exchange)
    finally:
        watcher.cancel()
        try:
            writer.close()
        except Exception:           # noqa: BLE001 (already gone)
            pass


# ---- on the request thread -----------------------------------------------------------

def can_hand_over():
    """Whether this request's thread may hand its connection to the loop (a Waitress
    server made with `install`): its waits then cost no thread, and their caps are the
    loop's, not the threads'."""
    channel = getattr(_current, "channel", None)
    return channel is not None and channel.handover is None


def reply(eventloop, parked, response, method="GET"):
    """From Api._reply: hand the connection over when the server allows it, else relay
    (a HEAD too: Waitress leaves its body out)."""
    channel = getattr(_current, "channel", None)
    if channel is not None and channel.handover is None and method != "HEAD":
        try:
            # now, while the request is in hand: once it is answered, Waitress may close
            # its descriptor at any moment (a client that sent Connection: close)
            sock = channel.socket.dup()
        except OSError:
            return _relay(eventloop, parked, response)
        channel.handover = (eventloop, parked, [], sock)
        return b""
    return _relay(eventloop, parked, response)


def _relay(eventloop, parked, response):
    outbox = queue.Queue()
    holder = {}

    async def start():
        holder["exchange"] = exchange = RelayExchange(outbox)
        try:
            await _run(parked, exchange)
        finally:
            outbox.put(None)
    eventloop.submit(start())
    first = outbox.get()
    if first is None:               # nothing written: an empty 200
        return b""
    status, headers, content_type = first[1]
    response.status = status
    response.content_type = content_type
    for k, v in headers.items():
        response.set_header(k, v)

    def body():
        try:
            while (item := outbox.get()) is not None:
                yield item[1]
        finally:
            exchange = holder.get("exchange")
            if exchange is not None:
                eventloop.call_soon(exchange.gone.set)
    return body()


class HandoverChannel:
    """Mixed into Waitress's channel class by `install`."""
    handover = None     # (eventloop, parked, captured head, socket's duplicate) once parked

    def service(self):
        _current.channel = self
        try:
            super().service()
        finally:
            _current.channel = None
        if self.handover is not None:
            self._hand_over()

    def write_soon(self, data):
        if self.handover is not None:
            if isinstance(data, bytes):
                self.handover[2].append(data)
            return len(data)
        return super().write_soon(data)

    def _hand_over(self):
        # Waitress closes its own descriptor; the duplicate keeps the connection
        eventloop, parked, captured, sock = self.handover
        with self.requests_lock:
            self.close_when_flushed = True
            for request in self.requests:
                request.close()
            self.requests = []
        self.server.pull_trigger()
        sock.setblocking(False)
        eventloop.submit(_serve_socket(sock, b"".join(captured), parked)) \
            .add_done_callback(_log_failure)


def _log_failure(future):
    if not future.cancelled() and future.exception() is not None:
        log.error("a handed-over connection failed", exc_info=future.exception())


def install(server):
    """Let the routes of a Waitress server hand long-lived connections to the loop."""
    return mix_into(server, "Handover", HandoverChannel)
