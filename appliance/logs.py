"""One log format for every process: time, process name, level, message.

A process that logs on busy threads (the API: one access line per request) passes
queued=True: a record is then only put on a queue by the thread that logs it, and one
writer thread formats the waiting records and writes them in one write. Without it every
request thread takes the handler's lock around a write to stderr, and under load the
threads queue on that lock (issue 11: a third of the API's time). stop() writes what is
left; the API calls it on exit and on SIGTERM, so that no line is lost.

The writer waits BATCH_SECONDS after the first record of a batch before it drains the
queue: a put wakes the writer only when it sleeps in `get()`, so under load one wake-up
(and one write) serves every line of those milliseconds instead of one per request, each
of which took the GIL from the request threads (issue 32). A line reaches the stream at
most that much later; stop() does not wait for it.

The busiest logger, the access log, can skip the LogRecord on the request thread
altogether (`direct()`): where its records would only reach the writer, the request thread
puts (time, logger, format, arguments) on the queue and the writer makes the record.
"""

import atexit
import logging
import queue
import sys
import threading
import time

_STOP = object()
STOP_SECONDS = 10
# how long the writer lets lines gather once one came: at 2,000 requests/s, ~20 a write
BATCH_SECONDS = 0.01
_writer = None


def setup(name, level="INFO", queued=False):
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(name))
    stop()
    if queued:
        global _writer
        handler = _Enqueue(handler)
        _writer = handler.writer
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # watchdog logs every inotify event at DEBUG: noise that drowns a daemon's own lines
    logging.getLogger("watchdog").setLevel(max(logging.INFO, logging.getLevelName(level)
                                               if isinstance(level, str) else level))
    return logging.getLogger(name)


def stop():
    """Write every queued line and end the writer thread (if any); later records are
    written by the logging thread itself."""
    global _writer
    writer, _writer = _writer, None
    if writer is None:
        return
    root = logging.getLogger()
    if any(isinstance(h, _Enqueue) for h in root.handlers):
        root.handlers[:] = [writer.handler]
    writer.queue.put(_STOP)
    # bounded: a stream nobody reads (a full pipe) must not keep the process from exiting
    writer.join(STOP_SECONDS)


atexit.register(stop)


def direct(logger, level, msg, args):
    """logger.log(level, msg, *args) for a hot logger whose arguments never change (str,
    numbers): where the record would reach nothing but the writer's queue (no handler or
    filter of its own nor of its ancestors, the level enabled), only (time, logger, msg,
    args) are queued and the writer makes the record. Returns False, having done nothing,
    where that does not hold (no queued logging, a test's handler): then log as usual."""
    writer = _writer
    if writer is None or logger.filters or logger.disabled or not logger.isEnabledFor(level):
        return False
    handler, current = None, logger
    while current is not None:
        for found in current.handlers:
            if handler is not None or found is not writer.enqueue:
                return False
            handler = found
        if not current.propagate:
            break
        current = current.parent
    if handler is None or handler.filters or level < handler.level:
        return False
    writer.queue.put((time.time(), logger.name, level, msg, args))
    return True


class _Formatter(logging.Formatter):
    """The one format; line() writes it for a direct() entry without a LogRecord, the
    time's text made once a second (only the writer thread calls it)."""

    def __init__(self, name):
        super().__init__(f"%(asctime)s {name}[%(process)d] %(levelname)s %(name)s: %(message)s")
        self.process_name = name
        self._second = self._stamp = None

    def line(self, created, logger, level, msg, args, pid):
        second = int(created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(created))
            self._second = second
        # as formatTime() with default_msec_format, and as LogRecord makes msecs
        return (f"{self._stamp},{int((created - second) * 1000):03d} {self.process_name}"
                f"[{pid}] {logging.getLevelName(level)} {logger}: {msg % args}")


class _Enqueue(logging.Handler):
    """logging.handlers.QueueHandler without its lock and its formatting on the caller's
    thread (and without importing logging.handlers, pickle and socket in every process)."""

    def __init__(self, handler):
        super().__init__()
        self.writer = _Writer(handler, self)
        self.queue = self.writer.queue

    def handle(self, record):
        # no handler lock: SimpleQueue.put is thread-safe
        if self.filter(record):
            self.emit(record)
            return True
        return False

    def emit(self, record):
        try:
            # the message is merged now, as its arguments may change after the call; the
            # line (time, traceback) is formatted by the writer
            record.msg, record.args = record.getMessage(), None
            self.queue.put(record)
        except Exception:
            self.handleError(record)


class _Writer(threading.Thread):
    def __init__(self, handler, enqueue):
        super().__init__(name="log-writer", daemon=True)
        self.handler = handler
        self.enqueue = enqueue
        self.queue = queue.SimpleQueue()
        # what a record made by direct() shares with every other: this process's, this
        # thread's; the writer lives in the process that made it (a fork does not copy it)
        self.template = vars(logging.LogRecord("", logging.INFO, "", 0, "", (), None))
        self.pid = self.template["process"]
        self.start()

    def record(self, entry):
        """The LogRecord of a direct() entry, as the logger would have made it (no caller:
        the formats here name none)."""
        created, name, level, msg, args = entry
        record = logging.LogRecord.__new__(logging.LogRecord)
        record.__dict__.update(self.template)
        record.name, record.msg, record.args = name, msg, args
        record.levelno, record.levelname = level, logging.getLevelName(level)
        record.created = created
        record.msecs = int((created - int(created)) * 1000) + 0.0
        record.relativeCreated = (created - logging._startTime) * 1000
        return record

    def run(self):
        stopping = False
        while not stopping:
            batch = [self.queue.get()]
            if batch[0] is not _STOP:
                time.sleep(BATCH_SECONDS)
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            lines, record = [], None
            formatter = self.handler.formatter
            fast = formatter.line if isinstance(formatter, _Formatter) else None
            for item in batch:
                if item is _STOP:
                    stopping = True
                    continue
                try:
                    if isinstance(item, tuple) and fast is not None:
                        lines.append(fast(*item, self.pid) + "\n")
                        continue
                    record = self.record(item) if isinstance(item, tuple) else item
                    lines.append(self.handler.format(record) + "\n")
                except Exception:
                    self.handler.handleError(record)
            if lines:
                try:
                    self.handler.stream.write("".join(lines))
                    self.handler.stream.flush()
                except Exception:
                    self.handler.handleError(record)
