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
