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

import re

from appliance.cli import CliError, NotLoggedIn, UsageError, output, schema
from appliance.cli.client import (MARKER_HEADER, ApiClient, ApiError, Transport, UrllibTransport,
                                  normalize_endpoint)
from appliance.cli.session import SessionStore, config_dir_from_environ
from appliance.cli.trust import ask_on_terminal
from appliance.kinds import ADMIN_PROJECT

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_PAGE_SIZE = 100
# One --wait-timeout for every command: the slowest thing waited for (a VM downloading its
# image and booting under TCG, a PostgreSQL instance on new nodes) takes minutes, and a
# default that differs per group is one more thing to remember.
WAIT_TIMEOUT = 900.0
UUID = re.compile(r"^[0-9a-fA-F-]{36}$")
PROJECTS = "/v1/iam/projects/"
# how items of a collection are named where it is not `name`
NAME_FIELDS = {"/v1/iam/users/": "username"}
PROJECT_HELP = ("the project's name or UUID (default: the token's project; with an "
                "administrator's unscoped token, the admin project)")


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


def add_wait_options(sub, waits_for="the daemons to apply it"):
    """--wait and --wait-timeout, the same on every command that writes."""
    sub.add_argument("--wait", action="store_true",
                     help=f"wait until it is ACTIVE, that is for {waits_for}, printing each "
                          "status change; exit 1 on ERROR or after --wait-timeout (a "
                          "resource without a status is done when the API answers). It "
                          "follows the event stream (/v1/events), and polls, saying so, "
                          "where the stream cannot be followed")
    sub.add_argument("--wait-timeout", type=positive_float, default=WAIT_TIMEOUT,
                     metavar="SECONDS", help=f"default {WAIT_TIMEOUT:g}")
    return sub


def add_project_option(sub):
    """-p/--project NAME-OR-UUID (--project-id: the reference CLI's spelling)."""
    sub.add_argument("-p", "--project", "--project-id", dest="project", metavar="PROJECT",
                     help=PROJECT_HELP)
    return sub


def add_body_options(sub):
    """key=value fields and --data, laid over what the options build."""
    sub.add_argument("fields", metavar="FIELD", nargs="*",
                     help="more fields: key=value (string) or key:=json (typed); they "
                          "override the options")
    sub.add_argument("--data", metavar="JSON|@FILE|-", help="the whole body as JSON")
    return sub


def fields_epilog(example: str | None, collection_path: str, options=None) -> str | None:
    """A create's epilog: its example, then the body's fields with types and which are
    required (from the API's OpenAPI document, see schema.py)."""
    parts = [f"example:\n  {example}"] if example else []
    listed = schema.fields_help(collection_path, options)
    if listed:
        parts.append(listed)
    return "\n\n".join(parts) or None


def item_path(collection_path: str, uuid: str) -> str:
    return collection_path.rstrip("/") + "/" + uuid


def resolve(client, collection_path, ref, name_field=None):
    """An item path from a UUID or a unique name; an ambiguous name is an error that lists
    the candidates."""
    collection_path = collection_path.rstrip("/") + "/"
    name_field = name_field or NAME_FIELDS.get(collection_path, "name")
    if UUID.match(ref):
        return collection_path + ref
    found = client.request("GET", collection_path, query=[(name_field, ref)]).payload()
    if not found:
        raise CliError(f"no {name_field} {ref!r} in {collection_path}")
    if len(found) > 1:
        candidates = ", ".join(
            item["uuid"] + (f" (project {item['project_id']})" if item.get("project_id") else "")
            for item in found)
        raise CliError(f"{len(found)} items named {ref!r} in {collection_path}: {candidates}; "
                       "give one of these UUIDs")
    return collection_path + found[0]["uuid"]


def resolve_uuid(client, collection_path, ref):
    return resolve(client, collection_path, ref).rsplit("/", 1)[1]


def resolve_references(client, collection_path, body):
    """`body` with each reference field given by name replaced by the UUID it names (a role
    binding's user=alice role=viewer project=demo), as show and delete take names."""
    if not isinstance(body, dict):
        return body
    links = schema.references(collection_path)
    if isinstance(body.get("project_id"), str) and "project_id" not in links:
        links["project_id"] = PROJECTS
    for field, target in links.items():
        value = body.get(field)
        if isinstance(value, str) and value and not UUID.match(value) and \
                not value.startswith("/v1/"):
            body[field] = resolve_uuid(client, target, value)
    return body


def default_project(client):
    """The project a create goes to when neither the token nor the command names one: the
    admin project for an administrator, the only project a user sees, else an error that
    says how to give one."""
    try:
        client.request("GET", PROJECTS + ADMIN_PROJECT).payload()
        return ADMIN_PROJECT
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
    try:
        projects = client.request("GET", PROJECTS).payload()
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        projects = None
    if projects and len(projects) == 1:
        return projects[0]["uuid"]
    seen = f" (projects you see: {', '.join(p.get('name') or p['uuid'] for p in projects[:10])})" \
        if projects else ""
    raise UsageError("this needs a project, and the token is not scoped to one: give "
                     f"-p/--project NAME-OR-UUID{seen}, or log in to one with "
                     "`appliance login --project NAME`")


def create(client, collection_path, body, project=None):
    """POST `body` to the collection: -p PROJECT and references given by name become UUIDs;
    when the API wants a project_id that nobody gave, the default project is used."""
    if isinstance(body, dict):
        if project:
            body["project_id"] = resolve_uuid(client, PROJECTS, project)
        body = resolve_references(client, collection_path, body)
    try:
        return client.request("POST", collection_path, body=body).payload()
    except ApiError as exc:
        unscoped = client.session is not None and not client.session.scope
        if exc.status == 403 and unscoped and not project:
            # a project's member holds its rights in the project only: a token without one
            # is refused before the project is even looked at
            raise CliError(f"{exc.message}; the token is not scoped to a project: log in to "
                           "one with `appliance login --project NAME`, or give "
                           "-p/--project NAME-OR-UUID", exc.exit_status) from None
        if exc.status != 400 or not exc.message.startswith("project_id: required") or \
                not isinstance(body, dict) or body.get("project_id"):
            raise
    body["project_id"] = default_project(client)
    return client.request("POST", collection_path, body=body).payload()


def update(client, item, body):
    """PUT `body` on the item, references given by name becoming UUIDs."""
    collection_path = item.rstrip("/").rsplit("/", 1)[0]
    return client.request("PUT", item, body=resolve_references(client, collection_path, body)
                          ).payload()


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
        data = with_names(args, env, output.table_rows(path, data))
    else:
        data = output.detail_view(path, data)
    # Asked for, the values get a column even in a table too narrow for every field.
    text = output.render(data, hidden=() if shown else secret, wanted=secret if shown else ())
    if text:
        env.stdout.write(text + "\n")


# a table column holding a UUID -> the collection it names
REFERENCE_COLUMNS = {"hypervisor": "/v1/compute/hypervisors/", "node_set": "/v1/compute/sets/",
                     "node": "/v1/compute/nodes/"}
_REFERENCE_PATH = re.compile(r"^(/v1/[\w/-]+/)([0-9a-fA-F-]{36})$")


def with_names(args, env, rows):
    """Table rows whose references (a hypervisor's UUID, a /v1/.../<uuid> path) show the
    name they point at: a cut path says nothing. One GET per collection named; what cannot
    be read stays as it was."""
    names: dict[str, dict] = {}

    def name_of(collection, uuid):
        if collection not in names:
            try:
                items = session_client(args, env).request("GET", collection).payload()
                names[collection] = {i["uuid"]: i.get("name") or i.get("username")
                                     for i in items if isinstance(i, dict) and "uuid" in i}
            except CliError:
                names[collection] = {}
        return names[collection].get(uuid.lower()) or uuid

    out = []
    for row in rows:
        if isinstance(row, dict):
            row = dict(row)
            for key, value in row.items():
                if not isinstance(value, str):
                    continue
                match = _REFERENCE_PATH.match(value)
                if match:
                    row[key] = name_of(match.group(1), match.group(2))
                elif key in REFERENCE_COLUMNS and UUID.match(value):
                    row[key] = name_of(REFERENCE_COLUMNS[key], value)
        out.append(row)
    return out


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


def fetch_listing(client, path, query, args):
    """(items, marker of the next page or None) of a list command: every page with
    `--all`, else one page (`--limit`, `--marker`) or the server's default listing."""
    if args.all:
        items = []
        for page in client.iter_pages(path, query, args.limit or DEFAULT_PAGE_SIZE, args.marker):
            items.extend(page)
        return items, None
    query = list(query)
    if args.limit or args.marker:
        # the API pages only with a page size; a marker alone would be refused
        query.append(("page_limit", str(args.limit or DEFAULT_PAGE_SIZE)))
    if args.marker:
        query.append(("page_marker", args.marker))
    response = client.request("GET", path, query=query)
    return response.payload(), response.headers.get(MARKER_HEADER)
