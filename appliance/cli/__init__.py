"""The `appliance` command-line client.

Layout: `main` parses arguments and dispatches, `common` holds what every command module
shares (the environment, the logged-in client, output, request bodies), `groups`, `em` and
`repo` add the commands per capability, `client` speaks HTTP to the API, `session` keeps
the login between runs, `trust` says how an https endpoint is trusted (a pinned
certificate fingerprint, a CA file), `output` renders results for people or scripts.

The exit-code contract lives here because every module raises errors that carry one.
"""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    SUCCESS = 0
    CLIENT_ERROR = 1  # the server refused the request (HTTP 4xx other than 401)
    USAGE_ERROR = 2  # the command line is wrong; nothing was sent
    SERVER_ERROR = 3  # HTTP 5xx
    UNREACHABLE = 4  # connection refused, timeout, DNS failure
    NOT_LOGGED_IN = 5  # no session, or the session expired and could not be refreshed
    INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


EXIT_CODES_HELP = """\
exit codes:
  0  success
  1  the server refused the request (HTTP 4xx), or another local failure
  2  bad command line (nothing was sent)
  3  server error (HTTP 5xx)
  4  API unreachable (connection refused, timeout, DNS)
  5  not logged in, or the session expired (run `appliance login`)"""


class CliError(Exception):
    """An expected failure: printed as `error: <message>`, never as a traceback."""

    exit_status = ExitStatus.CLIENT_ERROR

    def __init__(self, message: str, exit_status: ExitStatus | None = None):
        super().__init__(message)
        self.message = message
        if exit_status is not None:
            self.exit_status = exit_status


class UsageError(CliError):
    exit_status = ExitStatus.USAGE_ERROR


class NotLoggedIn(CliError):
    exit_status = ExitStatus.NOT_LOGGED_IN
