"""The JSON error body for the errors that Waitress answers itself, before any application
code runs (see docs/api.md, "Errors from the server core"). Apart from wsgi.py: only the
API process serves HTTP, while the daemons build the app's routes without a server.
"""

import http
import json

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.rfc7230 import HEADER_FIELD_RE
from waitress.task import ErrorTask

from .errors import ERROR_TYPES, ApiError, Unauthorized

# Waitress's own body limit is a backstop at this many times the largest route limit
BACKSTOP = 2


def body_limit(settings):
    """Waitress's max_request_body_size. Waitress reads a whole body before it calls the
    application, and refuses one over its limit from the headers alone, closing the
    connection: a client that sends its whole body before reading (http.client, urllib)
    then sees a broken pipe, not the 413. So a body over a route's limit but under the
    backstop is read and refused by the route, and only a grossly oversized one is refused
    unread, by Waitress, answered with the JSON error body all the same."""
    return BACKSTOP * max(settings["max_body_bytes"], settings["max_upload_bytes"])


def json_errors(server):
    """Make a Waitress server answer the errors it finds itself (a body over its limit,
    a malformed header) with the JSON error body, and a malformed Authorization header
    with 401, as the application would."""
    server.channel_class = _JsonErrorChannel
    return server


def _broken_header(header_plus):
    """The lowercase name of the header line that Waitress refused, if one can be told."""
    for line in header_plus.split(b"\r\n")[1:]:
        if line[:1] not in (b" ", b"\t") and not HEADER_FIELD_RE.match(line):
            return line.split(b":", 1)[0].strip().lower()
    return None


class _Parser(HTTPRequestParser):
    bad_authorization = False

    def parse_header(self, header_plus):
        try:
            super().parse_header(header_plus)
        except ParsingError:
            self.bad_authorization = _broken_header(header_plus) == b"authorization"
            raise


class _JsonErrorTask(ErrorTask):
    def execute(self):
        found = self.request.error
        if getattr(self.request, "bad_authorization", False):
            error = Unauthorized("the Authorization header is malformed")
        elif found.code == 413:
            error = ApiError(f"body exceeds the limit of "
                             f"{self.channel.adj.max_request_body_size // BACKSTOP} bytes",
                             413, ERROR_TYPES[413])
        else:
            error = ApiError(f"{found.reason}: {found.body}", found.code,
                             ERROR_TYPES.get(found.code, found.reason.replace(" ", "")))
        body = json.dumps(error.body()).encode()
        self.status = f"{error.status} {http.HTTPStatus(error.status).phrase}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.response_headers.extend(error.headers.items())
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class _JsonErrorChannel(HTTPChannel):
    parser_class = _Parser
    error_task_class = _JsonErrorTask
