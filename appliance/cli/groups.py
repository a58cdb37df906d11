"""Commands per capability: `appliance <service> <collection> <verb>`.

They are the generic verbs with the collection filled in (`appliance secret passwords
list` is `appliance list secret/passwords`), plus what only makes sense per resource:
naming an item by its name instead of its UUID, the grammar every group shares
(`-n/--name`, `-p/--project`, `--wait`, docs/cli.md), defaults the API leaves to the
client, and `--wait` for resources that a daemon moves to ACTIVE.
"""

import argparse

from . import CliError, UsageError
from .common import (add_body_options, add_list_arguments,
                     add_project_option, add_wait_options, build_body, create, emit,
                     fields_epilog, option, resolve, session_client, update)
from . import schema
from .wait import Watched, wait_for

# service -> collections. Optional per collection: `name_field` (how items are named),
# `parents` (a sub-collection under an item of another collection), `create_defaults`
# (body fields sent unless given), `create_example`. `waitable`: a daemon moves the
# service's records to ACTIVE; `waits_for` says which, for the --wait message.
GROUPS = {
    "iam": {"help": "identities, projects, roles and bindings",
            "collections": ["users", "organizations", "projects", "roles", "permissions",
                            "permission_bindings", "role_bindings", "clients"],
            "name_field": {"users": "username"},
            # word -> (GET action of an item, summary)
            "item_reads": {"projects": {"quotas": (
                "quotas", "each quota's use and limit in the project")}},
            "create_example": {"projects": "-n demo",
                               "users": "-n alice password=s3cret-pass",
                               "role_bindings": "user=alice role=viewer project=demo"}},
    "vs": {"help": "values store: profiles, variables, values",
           "collections": ["profiles", "variables", "values"]},
    "dns": {"help": "domains and their records",
            "collections": ["domains", "records"],
            # records live under a domain: `appliance dns records list example.test`
            "parents": {"records": ("domain", "domains")},
            # word -> (GET action, summary, its query: (parameter, argparse flags, help))
            "item_reads": {"domains": {"resolve": (
                "resolve", "the built-in DNS server's answer for a name of the domain",
                (("name", ("name",), "the full name to ask (www.example.test)"),
                 ("type", ("-t", "--type"), "the record type (default A)")))}},
            "create_example": {
                "domains": "-n example.test",
                "records": "type=A record:='{\"kind\": \"A\", \"name\": \"www\", "
                           "\"address\": \"10.0.0.5\"}'"}},
    "secret": {"help": "secrets, passwords, SSH and RSA keys, certificates",
               "collections": ["secrets", "passwords", "ssh_keys", "rsa_keys"],
               "waitable": True,
               "waits_for": "the delivery daemon to write it to the data plane",
               # `plain` is the only constructor kind; the API still asks for it on secrets
               # to leave room for others, so the CLI fills it in.
               "create_defaults": {"secrets": {"constructor": {"kind": "plain"}}},
               "create_example": {
                   "secrets": "-n token value=abc --wait",
                   "passwords": "-n db --wait",
                   "ssh_keys": "-n deploy --wait",
                   "rsa_keys": "-n tls --wait"}},
}
NO_PASSWORD = ("note: {name} has no password, so it cannot log in until one is set: "
               "`appliance iam users update {name} password=...`\n")


def never_delivered(item_path, obj):
    """Why `obj` will stay NEW whatever we wait for, or None.

    A secret with neither value nor default_value has nothing to deliver: the delivery daemon
    leaves it NEW by design (docs/secrets.md) until one is set.
    """
    if "/v1/secret/secrets/" in item_path and obj.get("status") == "NEW" and \
            obj.get("value") is None and obj.get("default_value") is None:
        return (f"{item_path} has neither value nor default_value, so there is nothing to "
                "deliver and it stays NEW by design; set one (e.g. `value=...`) to deliver it")
    return None


def wait_active(client, item_path, env, timeout, waits_for):
    """Wait until ACTIVE (appliance/cli/wait.py), showing what we wait for and each move
    of the status or its reason on stderr.

    ERROR, timeout, or a record that can never become ACTIVE: CliError."""
    return wait_for(client, env, Watched(
        item_path, waits_for=waits_for,
        never=lambda obj: never_delivered(item_path, obj)), timeout)


def _base(collection, args):
    return collection(args) if callable(collection) else collection


def on_item_or_collection(generic, collection):
    """`generic` (list, show, delete) run on the item the command names by UUID or name,
    or on `collection` when it names none. `collection`: a path, or a function of the
    parsed arguments for commands shared by several collections."""
    def handler(args, env):
        base = _base(collection, args)
        ref = getattr(args, "ref", None)
        args.path = resolve(session_client(args, env), base, ref) if ref is not None else base
        return generic(args, env)
    return handler


def emit_after_wait(args, env, client, item_path, obj, waits_for):
    """Print `obj`, or with --wait the item once it is ACTIVE (a record without a status
    is done when the API answers)."""
    if getattr(args, "wait", False) and obj is None:
        obj = client.request("GET", item_path).payload()
    if getattr(args, "wait", False) and isinstance(obj, dict) and "status" in obj:
        obj = wait_active(client, item_path, env, args.wait_timeout, waits_for)
    emit(args, env, obj, item_path)
    return 0


def show_or_wait(generic, collection, waits_for):
    """`show` of a named item; with --wait, the item once it is ACTIVE."""
    def handler(args, env):
        client = session_client(args, env)
        args.path = resolve(client, _base(collection, args), args.ref)
        if not args.wait:
            return generic(args, env)
        return emit_after_wait(args, env, client, args.path, None, waits_for)
    return handler


def add_groups(commands, common, make_parser, handlers, extra=None):
    """Add `appliance <service> ...` to the top-level subparsers. `handlers` maps the
    generic verb names to their command functions; `extra` maps a service to a function
    that adds a collection of its own shape (`secret certificates`)."""
    for service, spec in GROUPS.items():
        first = spec["collections"][0]
        group = commands.add_parser(
            service, help=spec["help"], description=spec["help"], parents=[common],
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=f"example:\n  appliance {service} {first} list\n"
                   f"  appliance {service} {first} create --help")
        collections = group.add_subparsers(dest="collection", metavar="COLLECTION",
                                           required=True, parser_class=make_parser)
        for name in spec["collections"]:
            parent = spec.get("parents", {}).get(name)
            api = f"/v1/{service}/{parent[1]}/<{parent[0].upper()}>/{name}/" if parent \
                else f"/v1/{service}/{name}/"
            aliases = [name.replace("_", "-")] if "_" in name else []
            coll = collections.add_parser(name, aliases=aliases, help=api,
                                          description=f"the collection {api}",
                                          parents=[common])
            verbs = coll.add_subparsers(dest="verb", metavar="VERB", required=True,
                                        parser_class=make_parser)
            _add_verbs(verbs, common, service, spec, name, handlers)
        if service in (extra or {}):
            extra[service](collections, common, make_parser, handlers)


def _add_verbs(verbs, common, service, spec, name, handlers):
    path = f"{service}/{name}"
    name_field = spec.get("name_field", {}).get(name, "name")
    waits_for = spec.get("waits_for") or "the API to apply it"
    parent = spec.get("parents", {}).get(name)
    parent_arg = f" {parent[0].upper()}" if parent else ""
    create_example = spec.get("create_example", {}).get(name, "-n NAME")
    collection_path = f"/v1/{service}/{parent[1]}/<{parent[0]}>/{name}/" if parent \
        else f"/v1/{path}/"
    with_project = not parent and any(
        f["name"] == "project_id" for f in schema.create_fields(collection_path))

    def verb(word, summary, handler, item=False, body=False, aliases=()):
        example = f"appliance {service} {name} {word}{parent_arg}" + \
            (" NAME-OR-UUID" if item else "") + (f" {create_example}" if word == "add" else "")
        epilog = fields_epilog(example, collection_path, {
            name_field: "-n/--name", **({"project_id": "-p/--project"} if with_project else {})
        }) if word == "add" \
            else f"example:\n  {example}"
        sub = verbs.add_parser(word, help=summary, description=summary, parents=[common],
                               aliases=list(aliases),
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=epilog)
        if parent:
            sub.add_argument("parent_ref", metavar=parent[0].upper(),
                             help=f"the {parent[0]}'s name or UUID")
        if item:
            sub.add_argument("ref", metavar="NAME-OR-UUID",
                             help=f"the item's UUID or its {name_field}")
        if body:
            sub.add_argument("-n", "--name", dest="item_name", metavar="NAME",
                             help=f"the {name_field} field")
            if word == "add" and with_project:
                add_project_option(sub)
            add_body_options(sub)
        if body or word == "show":
            add_wait_options(sub, waits_for)
        sub.set_defaults(handler=handler, group_path=path, name_field=name_field,
                         parent=parent, create_defaults=spec.get("create_defaults", {}).get(name),
                         waits_for=waits_for)
        return sub

    listing = verb("list", f"list {name}", _run(handlers["list"]))
    add_list_arguments(listing)
    verb("show", f"show one of {name}", _run(handlers["show"], item=True), item=True)
    verb("add", f"add one of {name}", _run(None, method="POST"), body=True,
         aliases=("create",))
    verb("update", f"change fields of one of {name}", _run(None, item=True, method="PUT"),
         item=True, body=True)
    verb("delete", f"delete one of {name}", _run(handlers["delete"], item=True), item=True)
    for word, (action, summary, *query) in spec.get("item_reads", {}).get(name, {}).items():
        sub = verb(word, summary, _read_action(action, query[0] if query else ()), item=True)
        for parameter, flags, text in (query[0] if query else ()):
            if flags[0].startswith("-"):
                sub.add_argument(*flags, dest=f"query_{parameter}", help=text)
            else:
                sub.add_argument(f"query_{parameter}", metavar=parameter.upper(), help=text)
                sub.epilog = f"{sub.epilog.rstrip()} {parameter.upper()}"


def read_action(args, env, collection, action, query=(), name_field=None):
    """(answer, path) of `GET <item>/actions/<action>` for the item args.ref names in
    `collection`: the fetch of every read action's verb (their printing differs)."""
    client = session_client(args, env)
    item = resolve(client, collection, args.ref, name_field)
    path = f"{item}/actions/{action}"
    return client.request("GET", path, query=list(query)).payload(), path


def _read_action(action, query=()):
    """`GET <item>/actions/<action>`, with the query parameters given on the command line;
    a mapping of objects ({quota: {use, limit}}) is a table for people, one row per key."""
    def handler(args, env):
        given = [(parameter, str(getattr(args, f"query_{parameter}")))
                 for parameter, _, _ in query
                 if getattr(args, f"query_{parameter}", None) is not None]
        data, path = read_action(args, env, f"/v1/{args.group_path}/", action, given,
                                 args.name_field)
        if not option(args, "json") and isinstance(data, dict) and data and all(
                isinstance(v, dict) for v in data.values()):
            data = [{"name": key, **value} for key, value in data.items()]
        emit(args, env, data, path)
        return 0
    return handler


def _run(generic, item=False, method=None):
    """The verb on this collection (an item named by UUID or name): reads go to the generic
    verb; writes are sent here, with the collection's defaults, -n and -p, references
    given by name resolved; with --wait, wait for ACTIVE and print the final object."""
    def handler(args, env):
        client = session_client(args, env)
        if args.parent:
            # e.g. dns/records under DOMAIN -> dns/domains/<uuid>/records
            service, leaf = args.group_path.split("/")
            parent_item = resolve(client, f"/v1/{service}/{args.parent[1]}/", args.parent_ref)
            args.group_path = f"{parent_item[len('/v1/'):]}/{leaf}"
        collection = f"/v1/{args.group_path}/"
        args.path = resolve(client, collection, args.ref, args.name_field) if item \
            else args.group_path
        target = args.path if item else collection
        if method is None:
            if not getattr(args, "wait", False):
                return generic(args, env)
            sent = None
            shown = client.request("GET", target).payload()
            if "status" not in shown:
                emit(args, env, shown, target)      # nothing to wait for
                return 0
        else:
            given = build_body(args, env)
            if given is not None and not isinstance(given, dict):
                raise UsageError("the body must be a JSON object")
            body = {args.name_field: args.item_name} if args.item_name is not None else {}
            body.update(given or {})
            if method == "PUT":
                if not body:
                    raise UsageError("nothing to update: give -n, key=value fields or --data")
                sent = update(client, target, body)
            else:
                body = {**(args.create_defaults or {}), **body}
                sent = create(client, collection, body, option(args, "project"))
                target = collection + sent["uuid"]
                if collection == "/v1/iam/users/" and not body.get("password"):
                    env.stderr.write(NO_PASSWORD.format(name=sent.get("username")))
            if not getattr(args, "wait", False) or "status" not in sent:
                emit(args, env, sent, target)
                return 0
        try:
            result = wait_active(client, target, env, args.wait_timeout, args.waits_for)
        except CliError:
            if sent is not None:
                env.stderr.write(f"{target} was saved; the wait failed\n")
            raise
        emit(args, env, result, target)
        return 0
    return handler
