"""Entry point of the `appliance` command.

Shaped like HTTPie's core: `main()` is the thin process shell (real streams, Ctrl-C, the
unexpected), `program(args, env)` does the work and returns an exit status, and everything it
touches outside itself — streams, config dir, environment variables, HTTP, the password prompt,
the clock — comes in through `Environment`, so tests run it without a terminal or a home dir.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import os
import shutil
import sys
import uuid
from typing import Sequence

from appliance import __version__
from appliance.cli import EXIT_CODES_HELP, CliError, ExitStatus, NotLoggedIn, UsageError
from appliance.cli import (agent, audit, backup, certificates, compute, configs, em, events,
                           groups, lb, output, repo, services, sqldb)
from appliance.cli.client import (
    ApiError,
    INTROSPECT_PATH,
    LOGOUT_PATH,
    ApiClient,
    Unreachable,
    describe_unreachable,
    api_path,
    normalize_endpoint,
)
from appliance.cli.common import (
    PROJECTS,
    resolve_uuid,
    DEFAULT_PAGE_SIZE,
    fetch_listing,
    DEFAULT_TIMEOUT_SECONDS,
    add_list_arguments,
    Environment,
    build_body,
    emit,
    option,
    positive_float,
    session_client,
    split_field,
    timeout,
)
from appliance.cli.session import SessionStore, new_session, to_rfc3339
from appliance.cli import trust as tls

DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 11010
DEFAULT_ENDPOINT = f"http://{DEFAULT_API_HOST}:{DEFAULT_API_PORT}"


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> int:
    env = env if env is not None else Environment.from_process()
    argv = sys.argv[1:] if argv is None else argv
    try:
        return program(argv, env)
    except KeyboardInterrupt:
        env.stderr.write("\nerror: interrupted\n")
        return ExitStatus.INTERRUPTED
    except BrokenPipeError:
        # `appliance list ... | head` closed our stdout; point it at /dev/null so the
        # interpreter's final flush does not fail a second time.
        if env.stdout is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitStatus.CLIENT_ERROR
    except Exception as exc:
        if env.environ.get("APPLIANCE_CLI_DEBUG"):
            raise
        env.stderr.write(
            f"error: unexpected failure: {type(exc).__name__}: {exc}"
            " (set APPLIANCE_CLI_DEBUG=1 for a traceback)\n"
        )
        return ExitStatus.CLIENT_ERROR


def program(args: Sequence[str], env: Environment) -> int:
    """Run one command; expected failures become `error: ...` on stderr and an exit status."""
    args = list(args)
    try:
        supervisor_args = arguments_for_up(args)
        if supervisor_args is not None:
            return run_supervisor(supervisor_args)
        parsed = parse_arguments(build_parser(env), args)
        return int(parsed.handler(parsed, env))
    except _ParserExit as exit_request:
        return exit_request.status
    except CliError as exc:
        env.stderr.write(f"error: {exc.message}\n")
        return int(exc.exit_status)


# --- argument parsing -------------------------------------------------------------------------


class _ParserExit(Exception):
    def __init__(self, status: int):
        super().__init__(status)
        self.status = int(status)


class ArgumentParser(argparse.ArgumentParser):
    """argparse writing to the injected streams and returning instead of calling sys.exit."""

    def __init__(self, *args, env: Environment, width: int | None = None, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        # argparse makes a formatter at every add_argument (to check the metavar), and each
        # asked the terminal for its size: a third of the time of building the parser,
        # which every command does. The width is read once per build (build_parser), as
        # argparse reads it (the terminal's columns less 2).
        self.width = shutil.get_terminal_size().columns - 2 if width is None else width
        super().__init__(*args, **kwargs)
        self.env = env

    def _get_formatter(self):
        return self.formatter_class(prog=self.prog, width=self.width)

    def _print_message(self, message, file=None):
        if message:
            (self.env.stderr if file is sys.stderr else self.env.stdout).write(message)

    def exit(self, status=0, message=None):
        if message:
            self.env.stderr.write(message)
        raise _ParserExit(status)

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(ExitStatus.USAGE_ERROR, f"error: {message}\n")


FIELDS_HELP = "body fields: key=value sets a string, key:=JSON a typed value (key:=3, key:=true, key:='[\"a\"]')"
DATA_HELP = "JSON body: literal JSON, @FILE to read a file, - to read stdin; key=value fields override its keys"
PATH_HELP = "API path, with or without /v1 (iam/users, /v1/iam/users/)"

MAIN_DESCRIPTION = """\
Command-line client of the appliance API.

Log in once; the session (tokens and endpoint) is kept in ~/.config/appliance/session.json
($XDG_CONFIG_HOME and $APPLIANCE_CLI_CONFIG_DIR move it). Then use the generic verbs on any
API path: list, show, create, update, delete, action."""

MAIN_EPILOG = f"""\
examples:
  appliance login --username admin
  appliance list iam/users
  appliance create iam/projects name=demo
  appliance --json list dns/domains --all | jq '.[].name'

{EXIT_CODES_HELP}"""


LOGIN_DETAILS = f"""

The API is the first of: --endpoint URL; $APPLIANCE_ENDPOINT;
http://$APPLIANCE_API_HOST:$APPLIANCE_API_PORT, the variables `appliance up` reads (each
optional); {DEFAULT_ENDPOINT}. The password is the first of: stdin with --password-stdin;
$APPLIANCE_PASSWORD; a prompt when stdin is a terminal.

https endpoints: the appliance image serves a self-signed certificate, which no CA vouches
for. Trust it the way ssh trusts a host, before the password is sent:
  --fingerprint SHA256:AB:CD:...  pin the certificate whose fingerprint the appliance's
                                  console banner shows (its login line has it)
  --ca-file FILE                  trust certificates signed by the CA in FILE (PEM),
                                  with hostname checks
  neither                         a certificate this machine's CAs accept is used as is;
                                  otherwise its fingerprint is shown and you are asked on
                                  the terminal whether to pin it (trust on first use);
                                  without a terminal login refuses and says how to pass
                                  --fingerprint
  --insecure                      check nothing (warns on every command; avoid)
The choice is kept in the session and every later command checks the server against it: a
pinned certificate is compared by its SHA-256 fingerprint alone (no CA or hostname check, as
ssh's known_hosts), and a server whose certificate has changed is refused, with the old and
new fingerprints and the `appliance login --fingerprint ...` that pins the new one. A new
login to the same endpoint keeps the pin unless one of the options is given. Plain http
endpoints need none of this."""


def _common_options(parser_class) -> ArgumentParser:
    # SUPPRESS keeps a subcommand's unset option from overwriting one given before it, so
    # `appliance --json list x` and `appliance list x --json` mean the same.
    common = parser_class(add_help=False)
    group = common.add_argument_group("global options")
    group.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print the server's JSON unchanged (for scripts)")
    group.add_argument("--endpoint", metavar="URL", default=argparse.SUPPRESS,
                       help="API endpoint (for login, see `appliance login --help`; "
                            "other commands use the session's)")
    group.add_argument("--show-values", action="store_true", default=argparse.SUPPRESS,
                       help="show secret values in tables and views (hidden by default; "
                            "--json always has them)")
    group.add_argument("--timeout", metavar="SECONDS", type=positive_float, default=argparse.SUPPRESS,
                       help=f"seconds to wait for the API (default {DEFAULT_TIMEOUT_SECONDS:g})")
    return common


def build_parser(env: Environment) -> ArgumentParser:
    parser_class = functools.partial(ArgumentParser, env=env,
                                     width=shutil.get_terminal_size().columns - 2)
    common = _common_options(parser_class)
    parser = parser_class(prog="appliance", description=MAIN_DESCRIPTION, epilog=MAIN_EPILOG,
                          parents=[common])
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                     parser_class=parser_class)

    def command(name: str, summary: str, example: str, handler, details: str = "") -> ArgumentParser:
        epilog = f"example:\n  {example}\n\nexit codes: 0 ok, 1 refused (4xx), 2 usage, 3 server error (5xx), " \
                 "4 unreachable, 5 not logged in"
        sub = commands.add_parser(name, help=summary, description=summary + details, epilog=epilog,
                                  parents=[common])
        sub.set_defaults(handler=handler)
        return sub

    login = command("login", "log in and keep the session for later commands",
                    "appliance login --endpoint http://127.0.0.1:11010 --username admin\n"
                    "  APPLIANCE_API_PORT=11020 appliance login\n"
                    "  appliance login --endpoint https://127.0.0.1:8443 --fingerprint SHA256:AB:CD:...",
                    cmd_login, details=LOGIN_DETAILS)
    login.add_argument("--username", help="user to log in as (default $APPLIANCE_USERNAME or admin)")
    login.add_argument("--password-stdin", action="store_true",
                       help="read the password from stdin (else $APPLIANCE_PASSWORD, else a prompt)")
    login.add_argument("--project", metavar="PROJECT",
                       help="scope the token to this project (name or UUID)")
    trust_options = login.add_mutually_exclusive_group()
    trust_options.add_argument("--fingerprint", metavar="SHA256:...",
                               help="https: pin the certificate with this SHA-256 fingerprint, "
                                    "as the appliance's console banner shows it")
    trust_options.add_argument("--ca-file", metavar="FILE",
                               help="https: trust certificates signed by the CA in FILE (PEM)")
    trust_options.add_argument("--insecure", action="store_true",
                               help="https: do not check the certificate at all (warns on "
                                    "every command)")

    command("logout", "revoke the token and forget the session", "appliance logout", cmd_logout)
    command("whoami", "show the logged-in user, project and permissions", "appliance whoami", cmd_whoami)

    listing = command("list", "list a collection", "appliance list iam/users --filter status=ACTIVE --sort username",
                      cmd_list)
    listing.add_argument("path", metavar="PATH", help=PATH_HELP)
    add_list_arguments(listing)

    show = command("show", "show one object", "appliance show iam/users/<uuid>", cmd_show)
    show.add_argument("path", metavar="PATH/UUID", help=PATH_HELP)

    create = command("create", "create an object in a collection",
                     "appliance create iam/users username=alice password=s3cret tags:='[\"dev\"]'", cmd_create)
    create.add_argument("path", metavar="PATH", help=PATH_HELP)
    create.add_argument("fields", metavar="FIELD", nargs="*", help=FIELDS_HELP)
    create.add_argument("--data", metavar="JSON|@FILE|-", help=DATA_HELP)

    update = command("update", "change fields of an object (PUT, only the fields given)",
                     "appliance update iam/users/<uuid> email=alice@example.org", cmd_update)
    update.add_argument("path", metavar="PATH/UUID", help=PATH_HELP)
    update.add_argument("fields", metavar="FIELD", nargs="*", help=FIELDS_HELP)
    update.add_argument("--data", metavar="JSON|@FILE|-", help=DATA_HELP)

    delete = command("delete", "delete an object", "appliance delete iam/users/<uuid>", cmd_delete)
    delete.add_argument("path", metavar="PATH/UUID", help=PATH_HELP)

    action = command("action", "invoke an action (POST .../actions/NAME/invoke) or read one (--get)",
                     "appliance action repo/elements/<uuid> upgrade target=<uuid>", cmd_action)
    action.add_argument("path", metavar="PATH/UUID", help=PATH_HELP)
    action.add_argument("name", metavar="NAME", help="action name")
    action.add_argument("fields", metavar="FIELD", nargs="*",
                        help=FIELDS_HELP + "; with --get, key=value are query parameters")
    action.add_argument("--data", metavar="JSON|@FILE|-", help=DATA_HELP)
    action.add_argument("--get", action="store_true", help="read-only action: GET .../actions/NAME")

    command("daemons", "each daemon's state, since when, and its last successful pass "
            "(admin)", "appliance daemons", cmd_daemons)

    groups.add_groups(commands, common, parser_class, {
        "list": cmd_list, "show": cmd_show, "delete": cmd_delete},
        extra={"secret": certificates.add_collection})

    em.add_em_group(commands, common, parser_class)
    compute.add_group(commands, common, parser_class, {
        "list": cmd_list, "show": cmd_show, "delete": cmd_delete})
    services.add_group(commands, common, parser_class, {
        "list": cmd_list, "show": cmd_show, "delete": cmd_delete})
    repo.add_groups(commands, common, parser_class)
    configs.add_group(commands, common, parser_class, {
        "list": cmd_list, "show": cmd_show})
    lb.add_group(commands, common, parser_class, {
        "list": cmd_list, "show": cmd_show, "delete": cmd_delete})
    sqldb.add_group(commands, common, parser_class, {
        "list": cmd_list, "show": cmd_show, "delete": cmd_delete})
    backup.add_commands(commands, common, parser_class)
    agent.add_commands(commands, common, parser_class)
    audit.add_commands(commands, common, parser_class)
    events.add_commands(commands, common, parser_class)

    up = commands.add_parser("up", help="start the appliance (API and daemons) in the foreground",
                             description="Start the appliance; arguments go to the supervisor. "
                                         "Run `appliance up --help` for its options.",
                             epilog="example:\n  appliance up --state-dir ./var --api-port 11010")
    up.add_argument("argv", nargs=argparse.REMAINDER, help="supervisor arguments")
    up.set_defaults(handler=lambda parsed, _env: run_supervisor(parsed.argv))
    return parser


GLOBAL_OPTIONS_WITH_VALUE = ("--endpoint", "--timeout")


def arguments_for_up(args: list[str]) -> list[str] | None:
    """What follows `up` when it is the command, else None.

    Everything after `up` belongs to the supervisor, its own --help included; argparse cannot
    hand over such a tail when it starts with an option, so `up` is found before parsing.
    """
    index = 0
    while index < len(args):
        token = args[index]
        if token == "up":
            return args[index + 1:]
        if not token.startswith("-"):
            return None
        index += 2 if token in GLOBAL_OPTIONS_WITH_VALUE else 1
    return None


def parse_arguments(parser: ArgumentParser, args: list[str]) -> argparse.Namespace:
    """parse_args, except that key=value fields may also follow options.

    argparse stops filling a positional list at the first option, so
    `create things --data @f size:=2` would reject `size:=2`; such leftovers are fields.
    """
    parsed, leftovers = parser.parse_known_args(args)
    if leftovers:
        takes_fields = isinstance(getattr(parsed, "fields", None), list)
        if not takes_fields or any(item.startswith("-") for item in leftovers):
            parser.error(f"unrecognized arguments: {' '.join(leftovers)}")
        parsed.fields.extend(leftovers)
    return parsed


# --- commands ---------------------------------------------------------------------------------


def run_supervisor(argv: Sequence[str]) -> int:
    try:
        # Imported here: the supervisor pulls in the whole server side, which the client
        # commands never need.
        supervisor = importlib.import_module("appliance.supervisor")
    except ModuleNotFoundError as exc:
        if exc.name not in ("appliance.supervisor", "appliance"):
            raise
        raise CliError("`appliance up` is not available in this installation (no appliance.supervisor)") from None
    return int(supervisor.main(list(argv)) or 0)


def _read_password(args: argparse.Namespace, env: Environment, username: str, endpoint: str) -> str:
    if args.password_stdin:
        password = env.stdin.read().rstrip("\r\n")
    elif env.environ.get("APPLIANCE_PASSWORD"):
        password = env.environ["APPLIANCE_PASSWORD"]
    elif env.stdin_isatty:
        try:
            password = env.getpass(f"Password for {username} at {endpoint}: ")
        except EOFError:
            password = ""
    else:
        # No terminal to prompt on: waiting for input nobody will type would hang scripts.
        raise UsageError("no password: use --password-stdin or set APPLIANCE_PASSWORD")
    if not password:
        raise UsageError("empty password")
    return password


# Addresses a server binds to in order to listen everywhere; a client reaches it over loopback.
_LISTEN_ALL = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}


def login_endpoint(args: argparse.Namespace, env: Environment) -> str:
    """--endpoint, else $APPLIANCE_ENDPOINT, else the API address `appliance up` uses."""
    explicit = option(args, "endpoint") or env.environ.get("APPLIANCE_ENDPOINT")
    if explicit:
        return normalize_endpoint(explicit)
    host = env.environ.get("APPLIANCE_API_HOST") or DEFAULT_API_HOST
    host = _LISTEN_ALL.get(host, host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal in a URL
    port = env.environ.get("APPLIANCE_API_PORT") or str(DEFAULT_API_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"APPLIANCE_API_PORT must be a port number (1-65535), not {port!r}")
    return normalize_endpoint(f"http://{host}:{int(port)}")


def _warn(env: Environment):
    return lambda line: env.stderr.write(line + "\n")


def login_trust(args: argparse.Namespace, env: Environment, endpoint: str,
                store: SessionStore) -> tls.Trust | None:
    """How the endpoint's certificate is trusted (appliance/cli/trust.py), settled before a
    password is read or sent; None for plain http."""
    given = [name for name, value in (("--fingerprint", args.fingerprint),
                                      ("--ca-file", args.ca_file), ("--insecure", args.insecure))
             if value]
    if not endpoint.startswith("https:"):
        if given:
            raise UsageError(f"{given[0]} is for https endpoints; {endpoint} is plain http")
        return None
    if args.fingerprint:
        return tls.Trust(fingerprint=tls.parse_fingerprint(args.fingerprint))
    if args.ca_file:
        trust = tls.Trust(ca_file=os.path.abspath(args.ca_file))
        trust.ssl_context()  # an unreadable or invalid file is refused now, not at each command
        return trust
    if args.insecure:
        return tls.Trust(insecure=True)
    try:
        previous = store.load()
    except NotLoggedIn:
        previous = None
    if previous is not None and previous.endpoint == endpoint and previous.trust is not None:
        return previous.trust  # as ssh keeps known_hosts across logins
    try:
        found = tls.probe(endpoint, timeout(args))
    except OSError as exc:
        raise Unreachable(describe_unreachable(endpoint, exc, timeout(args))) from None
    if found.refusal is None:
        return tls.Trust()
    answer = env.ask(tls.question(endpoint, found)) if env.ask is not None else None
    if answer is None:
        raise tls.UntrustedCertificate(tls.no_terminal_message(endpoint, found))
    if answer.strip().lower() not in ("yes", "y"):
        raise tls.UntrustedCertificate(
            f"not trusted: the certificate of {endpoint} was not pinned; nothing was sent "
            "or saved")
    return tls.Trust(fingerprint=found.fingerprint)


def cmd_login(args: argparse.Namespace, env: Environment) -> int:
    endpoint = login_endpoint(args, env)
    username = args.username or env.environ.get("APPLIANCE_USERNAME") or "admin"
    scope = ""
    store = SessionStore(env.config_dir)
    trust = login_trust(args, env, endpoint, store)
    password = _read_password(args, env, username, endpoint)

    client = ApiClient(endpoint, env.transport, timeout(args), env.clock, trust=trust,
                       warn=_warn(env), pinning=bool(args.fingerprint))
    grant = {"grant_type": "password", "username": username, "password": password}
    if args.project:
        scope = f"project:{project_by_name_or_uuid(client, grant, args.project, env)}"
    tokens = client.get_token({**grant, "scope": scope})
    session = new_session(endpoint, username, scope, tokens, env.clock(), trust)
    store.save(session)

    summary = {
        "endpoint": endpoint,
        "username": username,
        "scope": scope,
        "expires_at": to_rfc3339(session.expires_at),
        "session_file": str(store.path),
        "tls": trust.to_json() if trust is not None else None,
    }
    if option(args, "json"):
        output.write_json(env.stdout, summary)
    else:
        where = f" in project {args.project}" if scope else ""
        trusted = f"; trusting {trust.describe()}" if trust is not None else ""
        env.stdout.write(f"logged in to {endpoint} as {username}{where}; "
                         f"token valid until {summary['expires_at']}{trusted}\n")
    return ExitStatus.SUCCESS


def project_by_name_or_uuid(client, grant, project, env):
    """A project's UUID; a name is looked up with an unscoped token, revoked after."""
    try:
        return str(uuid.UUID(project))
    except ValueError:
        pass
    unscoped = new_session(client.endpoint, grant["username"], "",
                           client.get_token({**grant, "scope": ""}), env.clock())
    lookup = ApiClient(client.endpoint, env.transport, client.timeout, env.clock, unscoped)
    try:
        return resolve_uuid(lookup, PROJECTS, project)
    except ApiError as exc:
        if exc.status != 403:
            raise
        raise CliError(f"cannot look the project {project!r} up by name ({exc.message}): "
                       "give its UUID", exc.exit_status) from None
    finally:
        with contextlib.suppress(CliError):
            lookup.request("POST", LOGOUT_PATH, body={})


def cmd_logout(args: argparse.Namespace, env: Environment) -> int:
    store = SessionStore(env.config_dir)
    try:
        session = store.load()
    except NotLoggedIn:
        store.delete()  # a damaged session file is as good as none
        session = None
    if session is None:
        env.stderr.write("not logged in; nothing to do\n")
        return ExitStatus.SUCCESS

    # A refresh only to revoke the fresh token would be pointless: an expired token is dead already.
    client = ApiClient(session.endpoint, env.transport, timeout(args), env.clock,
                       dataclasses.replace(session, refresh_token=None), warn=_warn(env))
    try:
        client.request("POST", LOGOUT_PATH, body={})
    except NotLoggedIn:
        store.delete()
        env.stdout.write(f"logged out of {session.endpoint} (the token had already expired or been revoked)\n")
        return ExitStatus.SUCCESS
    except CliError as exc:
        store.delete()
        raise CliError(
            f"{exc.message}; the local session was removed, but the server did not confirm "
            "that the token is revoked",
            exc.exit_status,
        ) from None
    store.delete()
    env.stdout.write(f"logged out of {session.endpoint}\n")
    return ExitStatus.SUCCESS


def cmd_whoami(args: argparse.Namespace, env: Environment) -> int:
    client = session_client(args, env)
    identity = client.request("GET", INTROSPECT_PATH).payload()
    if option(args, "json"):
        output.write_json(env.stdout, identity)
    elif isinstance(identity, dict):
        env.stdout.write(output.render_identity(identity, client.endpoint) + "\n")
    else:
        env.stdout.write(output.render(identity) + "\n")
    return ExitStatus.SUCCESS


def cmd_list(args: argparse.Namespace, env: Environment) -> int:
    path = api_path(args.path, collection=True)
    query: list[tuple[str, str]] = []
    for item in args.filter:
        key, is_json, value = split_field(item)
        if is_json:
            raise UsageError(f"--filter takes key=value, got {item!r}")
        query.append((key, value))
    if args.sort:
        query.append(("sort_key", args.sort))
    if args.sort or args.desc:
        query.append(("sort_dir", "desc" if args.desc else "asc"))

    items, next_marker = fetch_listing(session_client(args, env), path, query, args)

    emit(args, env, items, path)
    if next_marker:
        env.stderr.write(f"more items follow: add --all, or --limit {args.limit or DEFAULT_PAGE_SIZE} "
                         f"--marker {next_marker}\n")
    return ExitStatus.SUCCESS


def cmd_show(args: argparse.Namespace, env: Environment) -> int:
    client = session_client(args, env)
    path = api_path(args.path, collection=False)
    emit(args, env, client.request("GET", path).payload(), path)
    return ExitStatus.SUCCESS


def cmd_create(args: argparse.Namespace, env: Environment) -> int:
    path = api_path(args.path, collection=True)
    body = build_body(args, env)
    client = session_client(args, env)
    response = client.request("POST", path, body={} if body is None else body)
    emit(args, env, response.payload(), path)
    return ExitStatus.SUCCESS


def cmd_update(args: argparse.Namespace, env: Environment) -> int:
    path = api_path(args.path, collection=False)
    body = build_body(args, env)
    if body is None:
        raise UsageError("nothing to update: give key=value fields or --data")
    client = session_client(args, env)
    emit(args, env, client.request("PUT", path, body=body).payload(), path)
    return ExitStatus.SUCCESS


def cmd_delete(args: argparse.Namespace, env: Environment) -> int:
    path = api_path(args.path, collection=False)
    client = session_client(args, env)
    payload = client.request("DELETE", path).payload()
    if option(args, "json") or payload is not None:
        emit(args, env, payload, path)
    else:
        env.stdout.write(f"deleted {path}\n")
    return ExitStatus.SUCCESS


def cmd_daemons(args: argparse.Namespace, env: Environment) -> int:
    """GET /v1/system/daemons, one row per daemon."""
    client = session_client(args, env)
    emit(args, env, client.request("GET", "/v1/system/daemons").payload(), "/v1/system/daemons")
    return ExitStatus.SUCCESS


def cmd_action(args: argparse.Namespace, env: Environment) -> int:
    item = api_path(args.path, collection=False)
    name = args.name.strip()
    if not name or "/" in name or name in (".", ".."):
        raise UsageError(f"invalid action name {args.name!r}")
    if args.get:
        if args.data is not None:
            raise UsageError("--get sends no body; give key=value query parameters instead of --data")
        query = []
        for field in args.fields:
            key, is_json, value = split_field(field)
            if is_json:
                raise UsageError(f"--get takes key=value query parameters, got {field!r}")
            query.append((key, value))
        client = session_client(args, env)
        payload = client.request("GET", f"{item}/actions/{name}", query=query).payload()
    else:
        body = build_body(args, env)
        client = session_client(args, env)
        payload = client.request("POST", f"{item}/actions/{name}/invoke",
                                 body={} if body is None else body).payload()
    if payload is None and not option(args, "json"):
        env.stdout.write(f"{name}: done\n")
    else:
        emit(args, env, payload, item)
    return ExitStatus.SUCCESS


if __name__ == "__main__":
    sys.exit(main())
