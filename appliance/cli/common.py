"""What every command module shares: the injected `Environment`, the logged-in client,
output, and the request body built from `key=value` fields.

`main` and the per-capability modules (`groups`, `em`, `repo`) all import this module and
none of them imports another's internals, so there is no import cycle between them.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence, TextIO

from appliance.cli import NotLoggedIn, UsageError, output
from appliance.cli.client import ApiClient, Transport, UrllibTransport, normalize_endpoint
from appliance.cli.session import SessionStore, config_dir_from_environ
from appliance.cli.trust import ask_on_terminal

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_PAGE_SIZE = 100


@dataclasses.dataclass
class Environment:
    stdin: TextIO
    stdout: TextIO
    stderr: TextIO
    config_dir: Path
    environ: Mapping[str, str]
    transport: Transport
    getpass: Callable[[str], str]
    stdin_isatty: bool = False
    stdout_isatty: bool = False
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    # asks a question on the user's terminal and returns the answer, or None when there is
    # no terminal (login's trust on first use); None: never ask
    ask: Callable[[str], str | None] | None = None

    @classmethod
    def from_process(cls) -> "Environment":
        return cls(
            stdin=sys.stdin,
            stdout=sys.stdout,
            stderr=sys.stderr,
            config_dir=config_dir_from_environ(os.environ, Path.home()),
            environ=os.environ,
            transport=UrllibTransport(),
            getpass=getpass.getpass,
            stdin_isatty=bool(sys.stdin and sys.stdin.isatty()),
            stdout_isatty=bool(sys.stdout and sys.stdout.isatty()),
            ask=ask_on_terminal,
        )


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


positive_int.__name__ = "positive integer"  # argparse names the type in its error message


def verb_adder(verbs, common, noun, **defaults):
    """A function that adds one verb of a resource group to `verbs`: its summary is both
    help and description, `epilog` an example; an item verb takes NAME-OR-UUID; `defaults`
    go to every verb's parsed arguments (the handler's collection, say)."""
    def verb(word, summary, handler, item=True, aliases=(), epilog=None):
        sub = verbs.add_parser(word, help=summary, description=summary, aliases=list(aliases),
                               parents=[common],
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=f"example:\n  {epilog}" if epilog else None)
        if item:
            sub.add_argument("ref", metavar="NAME-OR-UUID", help=f"the {noun}'s UUID or name")
        sub.set_defaults(handler=handler, **defaults)
        return sub
    return verb


def with_given_fields(body, args, env, method):
    """`body` (built from a command's options) with the key=value fields or --data given
    on the command line laid over it; a PUT that would change nothing is refused."""
    given = build_body(args, env)
    if given is not None:
        if not isinstance(given, dict):
            raise UsageError("the body must be a JSON object")
        body.update(given)
    if method == "PUT" and not body:
        raise UsageError("nothing to update: give options, key=value fields or --data")
    return body


def add_list_arguments(parser):
    """The options of every list command: filters, sorting and paging."""
    parser.add_argument("--filter", metavar="KEY=VALUE", action="append", default=[],
                        help="equality filter; repeat a key for 'any of'")
    parser.add_argument("--sort", metavar="KEY", help="sort by this field")
    parser.add_argument("--desc", action="store_true", help="sort descending")
    parser.add_argument("--limit", metavar="N", type=positive_int, help="page size")
    parser.add_argument("--marker", metavar="UUID", help="start after this item")
    parser.add_argument("--all", action="store_true",
                        help=f"walk every page (pages of --limit, default {DEFAULT_PAGE_SIZE})")
positive_float.__name__ = "positive number"


def option(args: argparse.Namespace, name: str, default=None):
    return getattr(args, name, default)


def timeout(args: argparse.Namespace) -> float:
    return option(args, "timeout", DEFAULT_TIMEOUT_SECONDS)


def session_client(args: argparse.Namespace, env: Environment) -> ApiClient:
    store = SessionStore(env.config_dir)
    session = store.load()
    if session is None:
        raise NotLoggedIn("not logged in; run `appliance login`")
    requested = option(args, "endpoint")
    # Never send the session's token to a server other than the one that issued it.
    if requested and normalize_endpoint(requested) != session.endpoint:
        raise NotLoggedIn(
            f"the session is for {session.endpoint}, not {requested}; "
            f"run `appliance login --endpoint {requested}`"
        )
    return ApiClient(session.endpoint, env.transport, timeout(args), env.clock, session,
                     on_session_change=store.save, warn=lambda line: env.stderr.write(line + "\n"))


def emit(args: argparse.Namespace, env: Environment, data, path: str | None = None) -> None:
    """Print a payload: unchanged JSON with --json, else a table or key/value view.

    `path` is the API path the payload came from; under /v1/secret/ the people's view hides
    secret material unless --show-values was given (--json is for scripts and stays whole).
    """
    if option(args, "json"):
        if data is not None:
            output.write_json(env.stdout, data)
        return
    secret = output.sensitive_fields(path)
    shown = option(args, "show_values")
    if isinstance(data, list):
        data = output.table_rows(path, data)
    # Asked for, the values get a column even in a table too narrow for every field.
    text = output.render(data, hidden=() if shown else secret, wanted=secret if shown else ())
    if text:
        env.stdout.write(text + "\n")


def split_field(item: str) -> tuple[str, bool, str]:
    """`key=value` -> (key, False, value); `key:=json` -> (key, True, json)."""
    index = item.find("=")
    is_json = index > 0 and item[index - 1] == ":"
    key = item[: index - 1] if is_json else item[:index]
    if index < 0 or not key:
        raise UsageError(f"expected key=value or key:=json, got {item!r}")
    return key, is_json, item[index + 1:]


def parse_fields(items: Sequence[str]) -> dict:
    body = {}
    for item in items:
        key, is_json, raw = split_field(item)
        if is_json:
            try:
                body[key] = json.loads(raw)
            except ValueError as exc:
                raise UsageError(f"{key}:= needs a JSON value ({exc}), got {raw!r}") from None
        else:
            body[key] = raw
    return body


def read_data(spec: str, env: Environment):
    if spec == "-":
        text, source = env.stdin.read(), "stdin"
    elif spec.startswith("@"):
        try:
            text, source = Path(spec[1:]).read_text(encoding="utf-8"), spec[1:]
        except OSError as exc:
            raise UsageError(f"cannot read {spec[1:]}: {exc.strerror}") from None
    else:
        text, source = spec, "--data"
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{source} is not valid JSON: {exc}") from None


def build_body(args: argparse.Namespace, env: Environment):
    """The request body from --data and key=value fields, or None when neither was given."""
    fields = parse_fields(args.fields)
    if args.data is None:
        return fields if args.fields else None
    data = read_data(args.data, env)
    if not fields:
        return data
    if not isinstance(data, dict):
        raise UsageError("key=value fields can only be combined with a --data JSON object")
    return {**data, **fields}
