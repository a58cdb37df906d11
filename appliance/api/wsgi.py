"""WSGI layer around the Bottle app: one path form, one access-log line per request, one
audit entry per state-changing request (appliance/api/audit.py)."""

import logging
import time

from appliance import logs

from . import audit, request_context

access_log = logging.getLogger("appliance.access")
ACCESS_FORMAT = '%s "%s %s" %s %d %.1fms %s'


class Middleware:
    def __init__(self, app, trail=None):
        self.app = app
        self.trail = trail

    def __call__(self, environ, start_response):
        started = time.perf_counter()
        path = environ.get("PATH_INFO", "/")
        # a collection with or without its trailing slash is the same resource
        if len(path) > 1 and path.endswith("/"):
            environ["PATH_INFO"] = path.rstrip("/") or "/"
        seen = {}
        request_id = request_context.begin(environ)

        def recording_start_response(status, headers, exc_info=None):
            seen["status"] = status.split(" ", 1)[0]
            return start_response(status, [*headers, (request_context.HEADER, request_id)],
                                  exc_info)

        audited = self.trail is None or \
            environ.get("REQUEST_METHOD") not in audit.STATE_CHANGING
        size = 0
        try:
            body = self.app(environ, recording_start_response)
            if not audited and "status" in seen:
                # queued before the first byte leaves: a client that reads the trail once
                # it has its answer finds the entry (the reader flushes the queue first)
                audited = True
                self._audit(environ, path, seen["status"], request_id)
            for chunk in body:
                size += len(chunk)
                yield chunk
        finally:
            # the path only: query strings and bodies are never logged (they may
            # carry passwords or secret values)
            line = (environ.get("REMOTE_ADDR", "-"), environ.get("REQUEST_METHOD"), path,
                    seen.get("status", "-"), size, (time.perf_counter() - started) * 1000,
                    request_id)
            # the API process's writer makes the record itself (appliance/logs.py)
            if not logs.direct(access_log, logging.INFO, ACCESS_FORMAT, line):
                access_log.info(ACCESS_FORMAT, *line)
            if not audited:         # a body that failed, or set its status late
                self._audit(environ, path, seen.get("status"), request_id)
            request_context.end()

    def _audit(self, environ, path, status, request_id):
        try:
            self.trail.record(audit.entry(environ, path, status, request_id,
                                          request_context.actor()))
        except Exception:          # noqa: BLE001 (an entry never fails its request)
            self.trail.count_lost(1, "its entry could not be made")
