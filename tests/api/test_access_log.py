"""The API's log lines are written by one writer thread off the request threads
(appliance/logs.py, issue 11). Every request still gets its access line, in the same
format, and none is lost when the process is stopped with SIGTERM under load."""

import io
import logging
import re
import sys
import threading

from appliance import logs
from tests.api.test_flood import ApiProcess

LINE = re.compile(r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} api\[\d+\] INFO appliance\.access: '
                  r'127\.0\.0\.1 "GET /v1/health" 200 \d+ \d+\.\dms [0-9a-f]{32}$')


def test_every_request_has_its_line_after_sigterm(tmp_path):
    api = ApiProcess(tmp_path)
    answered = []

    def client():
        for _ in range(100):
            answered.append(api.get("/v1/health")[0])

    try:
        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        api.stop()          # SIGTERM: the queued lines are written before the exit
    assert answered == [200] * 400
    assert api.proc.returncode == 0
    with open(api.log_path) as f:
        lines = [line.rstrip("\n") for line in f if "appliance.access" in line]
    # the start-up probes asked for /v1/health too: at least one line per request
    assert len(lines) >= 400
    bad = [line for line in lines if not LINE.match(line)]
    assert not bad, bad[:3]


def test_stop_writes_what_is_queued_and_later_lines_directly(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        log = logs.setup("unit", "INFO", queued=True)
        args = ["first"]
        for i in range(1000):
            log.info("line %d %s", i, args)
        # the message is merged when logged: a later change of an argument is not seen
        args[0] = "changed"
        logs.stop()
        log.info("after stop")
        log.debug("below the level")
    finally:
        root.handlers[:], root.level = handlers, level
    lines = out.getvalue().splitlines()
    assert [line.split("unit: ", 1)[1] for line in lines] == \
        [f"line {i} ['first']" for i in range(1000)] + ["after stop"]
    assert all(" unit[" in line and " INFO " in line for line in lines)


def test_a_direct_line_is_the_loggers_own_line_and_a_handler_of_its_own_gets_records(
        monkeypatch):
    """logs.direct() (the access log's path in the API process) writes the line the
    logger would have written, and steps aside where anything but the writer would see
    the record (a test's handler on the logger)."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    access = logging.getLogger("appliance.access")
    fmt, args = '%s "%s %s" %s %d %.1fms %s', ("127.0.0.1", "GET", "/v1/health", "200",
                                                 17, 1.25, "ab" * 16)
    seen = []
    # tests/conftest.py's handler on `appliance` would see the records too
    monkeypatch.setattr(logging.getLogger("appliance"), "handlers", [])

    class Seen(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    try:
        logs.setup("api", "INFO", queued=True)
        access.info(fmt, *args)
        assert logs.direct(access, logging.INFO, fmt, args)
        logging.disable(logging.INFO)           # a level off: nothing is queued
        try:
            assert not logs.direct(access, logging.INFO, fmt, args)
        finally:
            logging.disable(logging.NOTSET)
        mine = Seen()
        access.addHandler(mine)
        try:
            assert not logs.direct(access, logging.INFO, fmt, args)
        finally:
            access.removeHandler(mine)
        logs.stop()
    finally:
        root.handlers[:], root.level = handlers, level
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(LINE.match(line.replace(" 17 ", " 0 ", 1))
                                   for line in lines), lines
    # the same line but for the milliseconds of its time
    assert lines[0][23:] == lines[1][23:] and lines[0][:19] <= lines[1][:19]
    assert seen == []       # direct() stepped aside: the caller logs as usual
