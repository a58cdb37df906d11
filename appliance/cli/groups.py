"""Commands per capability: `appliance <service> <collection> <verb>`.

They are the generic verbs with the collection filled in (`appliance secret passwords
list` is `appliance list secret/passwords`), plus what only makes sense per resource:
naming an item by its name instead of its UUID, and `--wait` for resources that a daemon
moves to ACTIVE.
"""

import argparse
import re
import time

from . import CliError, UsageError

UUID = re.compile(r"^[0-9a-fA-F-]{36}$")

# service -> collections; a collection with a status field supports --wait
GROUPS = {
    "iam": {"help": "identities, projects, roles and bindings",
            "collections": ["users", "organizations", "projects", "roles", "permissions",
                            "permission_bindings", "role_bindings", "clients"],
            "name_field": {"users": "username"}},
    "vs": {"help": "values store: profiles, variables, values",
           "collections": ["profiles", "variables", "values"]},
    "dns": {"help": "domains and their records",
            "collections": ["domains", "records"],
            # records live under a domain: `appliance dns records list example.test`
            "parents": {"records": ("domain", "domains")}},
    "secret": {"help": "secrets, passwords, SSH and RSA keys",
               "collections": ["secrets", "passwords", "ssh_keys", "rsa_keys"],
               "waitable": True},
}
POLL_SECONDS = 0.2


def resolve(client, collection_path, ref, name_field="name"):
    """An item path from a UUID or a unique name."""
    if UUID.match(ref):
        return collection_path.rstrip("/") + "/" + ref
    found = client.request("GET", collection_path, query=[(name_field, ref)]).payload()
    if not found:
        raise CliError(f"no {name_field} {ref!r} in {collection_path}")
    if len(found) > 1:
        raise CliError(f"{len(found)} items named {ref!r} in {collection_path}; use a UUID")
    return collection_path.rstrip("/") + "/" + found[0]["uuid"]


def wait_active(client, item_path, env, timeout):
    """Poll until ACTIVE, showing each status move on stderr. ERROR or timeout: CliError."""
    started = env.clock()
    last = None
    while True:
        obj = client.request("GET", item_path).payload()
        status = obj.get("status")
        elapsed = env.clock() - started
        if status != last:
            env.stderr.write(f"{item_path}: {status} ({elapsed:.1f} s)\n")
            env.stderr.flush()
            last = status
        if status == "ACTIVE":
            return obj
        if status == "ERROR":
            raise CliError(f"{item_path} is in ERROR: {obj.get('status_reason') or 'no reason'}")
        if elapsed > timeout:
            raise CliError(f"{item_path} is still {status} after {timeout:g} s")
        time.sleep(POLL_SECONDS)


def add_groups(commands, common, make_parser, handlers):
    """Add `appliance <service> ...` to the top-level subparsers. `handlers` maps the
    generic verb names to their command functions."""
    for service, spec in GROUPS.items():
        group = commands.add_parser(service, help=spec["help"], description=spec["help"],
                                    parents=[common])
        collections = group.add_subparsers(dest="collection", metavar="COLLECTION",
                                           required=True, parser_class=make_parser)
        for name in spec["collections"]:
            path = f"{service}/{name}"
            aliases = [name.replace("_", "-")] if "_" in name else []
            coll = collections.add_parser(name, aliases=aliases, help=f"/v1/{path}/",
                                          description=f"the collection /v1/{path}/",
                                          parents=[common])
            verbs = coll.add_subparsers(dest="verb", metavar="VERB", required=True,
                                        parser_class=make_parser)
            _add_verbs(verbs, common, path, spec, name, handlers)


def _add_verbs(verbs, common, path, spec, name, handlers):
    name_field = spec.get("name_field", {}).get(name, "name")
    waitable = spec.get("waitable", False)
    parent = spec.get("parents", {}).get(name)
    example = f"appliance {path.replace('/', ' ')}" + (f" {parent[0].upper()}" if parent else "")

    def verb(word, summary, handler, item=False, fields=False):
        sub = verbs.add_parser(word, help=summary, description=summary, parents=[common],
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=f"example:\n  {example} {word}" +
                               (" NAME-OR-UUID" if item else ""))
        if parent:
            sub.add_argument("parent_ref", metavar=parent[0].upper(),
                             help=f"the {parent[0]}'s name or UUID")
        if item:
            sub.add_argument("ref", metavar="NAME-OR-UUID",
                             help=f"the item's UUID or its {name_field}")
        if fields:
            sub.add_argument("fields", metavar="FIELD", nargs="*",
                             help="key=value (string) or key:=json (typed)")
            sub.add_argument("--data", metavar="JSON|@FILE|-", help="the whole body as JSON")
        if waitable and word in ("create", "update", "show"):
            sub.add_argument("--wait", action="store_true",
                             help="wait until the daemon has made it ACTIVE, showing progress")
            sub.add_argument("--wait-timeout", type=float, default=60.0, metavar="SECONDS")
        sub.set_defaults(handler=handler, group_path=path, name_field=name_field,
                         parent=parent)
        return sub

    listing = verb("list", f"list {name}", _run(handlers["list"]))
    listing.add_argument("--filter", metavar="KEY=VALUE", action="append", default=[])
    listing.add_argument("--sort", metavar="KEY")
    listing.add_argument("--desc", action="store_true")
    listing.add_argument("--limit", metavar="N", type=int)
    listing.add_argument("--marker", metavar="UUID")
    listing.add_argument("--all", action="store_true", help="walk every page")
    verb("show", f"show one of {name}", _run(handlers["show"], item=True), item=True)
    verb("create", f"create one of {name}", _run(handlers["create"], method="POST"),
         fields=True)
    verb("update", f"change fields of one of {name}",
         _run(handlers["update"], item=True, method="PUT"), item=True, fields=True)
    verb("delete", f"delete one of {name}", _run(handlers["delete"], item=True), item=True)


def _run(generic, item=False, method=None):
    """The generic verb on this collection (an item named by UUID or name); with --wait,
    send the request here, then wait for ACTIVE and print the final object."""
    def handler(args, env):
        from .main import _emit, _session_client, build_body  # noqa: PLC0415 - import cycle
        client = _session_client(args, env)
        if args.parent:
            # e.g. dns/records under DOMAIN -> dns/domains/<uuid>/records
            service, leaf = args.group_path.split("/")
            parent_item = resolve(client, f"/v1/{service}/{args.parent[1]}/", args.parent_ref)
            args.group_path = f"{parent_item[len('/v1/'):]}/{leaf}"
        collection = f"/v1/{args.group_path}/"
        args.path = resolve(client, collection, args.ref, args.name_field) if item \
            else args.group_path
        if not getattr(args, "wait", False):
            return generic(args, env)
        target = args.path if item else collection
        if method is not None:
            body = build_body(args, env)
            if method == "PUT" and body is None:
                raise UsageError("nothing to update: give key=value fields or --data")
            sent = client.request(method, target, body={} if body is None else body).payload()
            target = collection + sent["uuid"]
        _emit(args, env, wait_active(client, target, env, args.wait_timeout))
        return 0
    return handler
