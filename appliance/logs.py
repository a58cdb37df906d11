"""One log format for every process: time, process name, level, message.

A process that logs on busy threads (the API: one access line per request) passes
queued=True: a record is then only put on a queue by the thread that logs it, and one
writer thread formats the waiting records and writes them in one write. Without it every
request thread takes the handler's lock around a write to stderr, and under load the
threads queue on that lock (issue 11: a third of the API's time). stop() writes what is
left; the API calls it on exit and on SIGTERM, so that no line is lost.
"""

import atexit
import logging
import queue
import sys
import threading

_STOP = object()
STOP_SECONDS = 10
_writer = None


def setup(name, level="INFO", queued=False):
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s {name}[%(process)d] %(levelname)s %(name)s: %(message)s"))
    stop()
    if queued:
        global _writer
        _writer = _Writer(handler)
        handler = _Enqueue(_writer.queue)
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


class _Enqueue(logging.Handler):
    """logging.handlers.QueueHandler without its lock and its formatting on the caller's
    thread (and without importing logging.handlers, pickle and socket in every process)."""

    def __init__(self, records):
        super().__init__()
        self.queue = records

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
    def __init__(self, handler):
        super().__init__(name="log-writer", daemon=True)
        self.handler = handler
        self.queue = queue.SimpleQueue()
        self.start()

    def run(self):
        stopping = False
        while not stopping:
            batch = [self.queue.get()]
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            lines, record = [], None
            for item in batch:
                if item is _STOP:
                    stopping = True
                    continue
                record = item
                try:
                    lines.append(self.handler.format(record) + "\n")
                except Exception:
                    self.handler.handleError(record)
            if lines:
                try:
                    self.handler.stream.write("".join(lines))
                    self.handler.stream.flush()
                except Exception:
                    self.handler.handleError(record)
