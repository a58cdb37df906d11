"""`appliance services ...`: the Element Manager's services (`/v1/em/services/`).

The generic verbs with the collection filled in, options for a service's shape (the
command, where it runs, its kind and ordering), the actions start, stop and restart, and
`--wait` until the node agents run it as asked (docs/services.md).
"""

import argparse

from .common import (add_body_options, add_list_arguments, add_project_option,
                     add_wait_options, create, fields_epilog, session_client, update,
                     verb_adder, with_given_fields)
from .groups import emit_after_wait, on_item_or_collection, resolve, show_or_wait

COLLECTION = "/v1/em/services/"
OPTION_OF_FIELD = {"name": "-n/--name", "description": "-D/--description",
                   "project_id": "-p/--project", "path": "--command",
                   "target": "--node, --node-set", "service_type": "--type", "user": "--user",
                   "group": "--group", "target_status": "--target-status",
                   "before": "--before-shell, --before-service",
                   "after": "--after-shell, --after-service"}
WAITS_FOR = "the node agents to run it"
KINDS = ("simple", "oneshot", "monopoly", "monopoly_oneshot")
TARGET_STATUSES = ("enabled", "disabled", "started", "stopped")


def add_group(commands, common, make_parser, handlers):
    group = commands.add_parser(
        "services", help="commands run as systemd units on nodes",
        description="services: /v1/em/services/", parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  appliance services add -n web --command 'exec python3 -m "
               "http.server' --node web-0\n  appliance services restart web")
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True,
                                 parser_class=make_parser)

    verb = verb_adder(verbs, common, "service", collection_path=COLLECTION)

    def waiting(sub):
        return add_wait_options(sub, WAITS_FOR + " on every node")

    add_list_arguments(verb("list", "list services",
                            on_item_or_collection(handlers["list"], COLLECTION), item=False))
    waiting(verb("show", "show a service (node_status: how each node runs it)",
                 show_or_wait(handlers["show"], COLLECTION, WAITS_FOR)))
    add = waiting(verb("add", "add a service", _write("POST"), item=False,
                       aliases=("create",)))
    add.epilog = fields_epilog("appliance services add -n backup --command '/usr/local/bin/"
                               "backup' --type oneshot --node-set db", COLLECTION,
                               OPTION_OF_FIELD)
    update = waiting(verb("update", "change fields of a service (its status goes back to "
                                    "NEW)", _write("PUT")))
    for sub in (add, update):
        _shape_options(sub, create=sub is add)
    verb("delete", "delete a service (its units are removed from the nodes)",
         on_item_or_collection(handlers["delete"], COLLECTION))
    for action, summary in (("start", "run the service (its boot setting stays)"),
                            ("stop", "stop the service (its boot setting stays)"),
                            ("restart", "restart the service on its nodes")):
        waiting(verb(action, summary, _action(action)))


def _shape_options(sub, create):
    opt = sub.add_argument
    opt("-n", "--name")
    opt("-D", "--description")
    if create:
        add_project_option(sub)
    opt("--command", help="the command (the API's field `path`), run through /bin/sh -c")
    where = sub.add_mutually_exclusive_group()
    where.add_argument("--node", action="append", metavar="NODE",
                       help="a node (name or UUID) to run on; repeat for several")
    where.add_argument("--node-set", metavar="SET", help="a node set: every member runs it")
    opt("--type", choices=KINDS, help="service_type kind (default simple)" if create
        else "service_type kind")
    opt("--user")
    opt("--group")
    opt("--target-status", choices=TARGET_STATUSES)
    for field in ("before", "after"):
        when = "before" if field == "before" else "after"
        opt(f"--{field}-shell", action="append", metavar="COMMAND",
            help=f"a command run {when} the service's own (repeatable)")
        opt(f"--{field}-service", action="append", metavar="SERVICE",
            help=f"a service (name or UUID) that runs {when} this one where both run "
                 "(repeatable)")
    add_body_options(sub)


def _body(args, client, create):
    body = {field: getattr(args, opt) for opt, field in (
        ("name", "name"), ("description", "description"), ("command", "path"), ("user", "user"), ("group", "group"),
        ("target_status", "target_status")) if getattr(args, opt, None) is not None}
    if args.node:
        nodes = [resolve(client, "/v1/compute/nodes/", n).rsplit("/", 1)[1] for n in args.node]
        body["target"] = {"kind": "node", "node": nodes[0]} if len(nodes) == 1 else \
            {"kind": "nodes", "nodes": nodes}
    elif args.node_set:
        body["target"] = {"kind": "node_set", "node_set": resolve(
            client, "/v1/compute/sets/", args.node_set).rsplit("/", 1)[1]}
    if args.type is not None or create:
        body["service_type"] = {"kind": args.type or "simple"}
    for field in ("before", "after"):
        shells = getattr(args, f"{field}_shell") or []
        services = getattr(args, f"{field}_service") or []
        if shells or services:
            body[field] = [{"kind": "shell", "command": c} for c in shells] + [
                {"kind": "service", "service": resolve(client, COLLECTION, s).rsplit(
                    "/", 1)[1]} for s in services]
    return body


def _write(method):
    def handler(args, env):
        client = session_client(args, env)
        body = _body(args, client, create=method == "POST")
        with_given_fields(body, args, env, method)
        target = resolve(client, COLLECTION, args.ref) if method == "PUT" else COLLECTION
        sent = create(client, target, body, getattr(args, "project", None)) \
            if method == "POST" else update(client, target, body)
        return emit_after_wait(args, env, client, COLLECTION + sent["uuid"], sent, WAITS_FOR)
    return handler


def _action(name):
    def handler(args, env):
        client = session_client(args, env)
        item = resolve(client, COLLECTION, args.ref)
        obj = client.request("POST", f"{item}/actions/{name}/invoke", body={}).payload()
        return emit_after_wait(args, env, client, item, obj, WAITS_FOR)
    return handler
