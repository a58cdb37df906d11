"""`appliance sqldb ...`: DBaaS (docs/sqldb.md): PostgreSQL versions, instances, and the
users and databases of an instance.

Items are named by UUID or name; users and databases by UUID or name under their instance
(`appliance sqldb databases add shop -n orders --owner alice`). A user's password is never
taken from a terminal in clear: without `--password` it is prompted for (twice, not
echoed), or read from stdin with `--password-stdin`. Options build the body; key=value
fields and `--data` override them, as in the other groups.
"""

import argparse

from . import UsageError, schema
from .common import (add_body_options, add_list_arguments, add_project_option,
                     add_wait_options, create, emit, session_client, update,
                     verb_adder, with_given_fields)
from .groups import emit_after_wait, on_item_or_collection, read_action, resolve, show_or_wait

INSTANCES = "/v1/sqldb/instances/"
# the spec's /v1/types/sqldb/versions/ answers {"versions": [...]}; the same versions at the
# reference CLI's path answer a plain list, which listing, paging and names work with
VERSIONS = "/v1/types/postgres/versions/"
NODES = "/v1/compute/nodes/"
WAITS_FOR = "the sqldb daemon and the nodes' agents to run PostgreSQL"
PROMPT = object()       # --password given without a value: prompt
FIELDS_OF = {"versions": VERSIONS, "instances": INSTANCES,
             "users": INSTANCES + "<instance>/users/",
             "databases": INSTANCES + "<instance>/databases/"}
OPTION_OF_FIELD = {"name": "-n/--name", "description": "-D/--description",
                   "project_id": "-p/--project", "version": "-v/--version",
                   "placement": "--node", "cpu": "--cpu", "ram": "--ram",
                   "disk_size": "--disk-size", "nodes_number": "--nodes-number",
                   "sync_replica_number": "--sync-replica-number", "password": "--password",
                   "owner": "--owner", "image": "--image", "major": "--major",
                   "deprecated": "--deprecated"}


def add_group(commands, common, make_parser, handlers):
    group = commands.add_parser(
        "sqldb", help="DBaaS: PostgreSQL instances, their users and databases, versions",
        description="DBaaS: /v1/sqldb/instances/ with their users/ and databases/, and "
                    "/v1/types/sqldb/versions/", parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  appliance sqldb versions list\n"
               "  appliance sqldb instances add -n shop -v 15 --cpu 2 --ram 2048 "
               "--disk-size 20 --nodes-number 3 --wait\n"
               "  appliance sqldb instances add -n local -v 15 --node hw1 --wait   # no sizes\n"
               "  appliance sqldb users add shop -n alice      # prompts for the password\n"
               "  appliance sqldb databases add shop -n orders --owner alice\n"
               "  appliance sqldb instances show shop")
    collections = group.add_subparsers(dest="collection", metavar="COLLECTION",
                                       required=True, parser_class=make_parser)
    for name, (summary, adder) in COLLECTIONS.items():
        coll = collections.add_parser(name, help=summary, description=summary,
                                      parents=[common])
        verbs = coll.add_subparsers(dest="verb", metavar="VERB", required=True,
                                    parser_class=make_parser)
        adder(verbs, common, handlers)
        add = verbs.choices["add"]
        add.epilog = "\n\n".join(filter(None, [add.epilog, schema.fields_help(
            FIELDS_OF[name], OPTION_OF_FIELD, add)]))


def _body_options(sub):
    add_body_options(sub)
    add_wait_options(sub, WAITS_FOR)


def _waiting(sub):
    return add_wait_options(sub, WAITS_FOR)


def _given(args, pairs):
    return {field: getattr(args, opt) for opt, field in pairs
            if getattr(args, opt, None) is not None}


def _uuid(path):
    return path.rstrip("/").rsplit("/", 1)[1]


# ---- versions ---------------------------------------------------------------------------

def _versions(verbs, common, handlers):
    verb = verb_adder(verbs, common, "version")
    add_list_arguments(verb("list", "list PostgreSQL versions",
                            on_item_or_collection(handlers["list"], VERSIONS), item=False))
    verb("show", "show a version", on_item_or_collection(handlers["show"], VERSIONS))
    add = verb("add", "add a version (administrators)", _write_version("POST"), item=False,
               aliases=("create",),
               epilog="appliance sqldb versions add -n 16 --major 16 --image URL")
    update = verb("update", "change a version (administrators)", _write_version("PUT"),
                  epilog="appliance sqldb versions update 15 --deprecated")
    for sub in (add, update):
        sub.add_argument("-n", "--name")
        sub.add_argument("-D", "--description")
        sub.add_argument("--image", help="the node image of its instances' nodes (\"\": the "
                                         "node image's own PostgreSQL)")
        if sub is add:
            sub.add_argument("--major", type=int, help="the PostgreSQL major version "
                                                       "(10..99); fixed once made")
        state = sub.add_mutually_exclusive_group()
        state.add_argument("--deprecated", action="store_true", default=None,
                           help="refused for new instances; existing ones keep it")
        state.add_argument("--not-deprecated", dest="deprecated", action="store_false",
                           help="usable by new instances again")
        _body_options(sub)
    verb("delete", "delete a version no instance uses (administrators)",
         on_item_or_collection(handlers["delete"], VERSIONS))


def _write_version(method):
    def handler(args, env):
        client = session_client(args, env)
        item = resolve(client, VERSIONS, args.ref) if method == "PUT" else None
        body = _given(args, (("name", "name"), ("description", "description"),
                             ("image", "image"), ("major", "major"),
                             ("deprecated", "deprecated")))
        with_given_fields(body, args, env, method)
        sent = client.request(method, item or VERSIONS, body=body).payload()
        emit(args, env, sent, VERSIONS + sent["uuid"])
        return 0
    return handler


# ---- instances --------------------------------------------------------------------------

def _instances(verbs, common, handlers):
    verb = verb_adder(verbs, common, "instance")
    add_list_arguments(verb("list", "list instances",
                            on_item_or_collection(handlers["list"], INSTANCES), item=False))
    _waiting(verb("show", "show an instance (status, ipsv4, endpoint, primary, "
                          "node_status)", show_or_wait(handlers["show"], INSTANCES,
                                                       WAITS_FOR)))
    add = _waiting(verb("add", "add an instance", _write_instance("POST"), item=False,
                        aliases=("create",),
                        epilog="appliance sqldb instances add -n shop -v 15 --cpu 2 "
                               "--ram 2048 --disk-size 20 --nodes-number 3 --wait"))
    update = _waiting(verb("update", "change an instance (sizes grow the data plane; the "
                                     "disk never shrinks, the version never changes)",
                           _write_instance("PUT"),
                           epilog="appliance sqldb instances update shop --ram 4096"))
    for sub in (add, update):
        opt = sub.add_argument
        opt("-n", "--name")
        opt("-D", "--description")
        if sub is add:
            add_project_option(sub)
            opt("-v", "--version", metavar="VERSION", help="the version's UUID or name")
            opt("--node", metavar="NODE", action="append",
                help="place it on this existing node (UUID or name) of the project, not "
                     "on a node set of its own; repeat once per node (nodes_number)")
        opt("--cpu", type=int, help="cores per node, 1..128 (not needed with --node)")
        opt("--ram", type=int, help="MB per node, 512..1048576 (not needed with --node)")
        opt("--disk-size", type=int, help="GB per node, 8..1024; never shrinks (not "
                                          "needed with --node)")
        opt("--client-networks", metavar="CIDR,...",
            help="who may log in: comma-separated CIDRs (\"\": nobody); \"default\": the "
                 "project's networks, the nodes' own networks and the setting "
                 "sqldb_client_networks (docs/sqldb.md). Applies without a restart")
        opt("--nodes-number", type=int, help="nodes, 1..16: a primary and replicas "
                                             "(default 1; with --node, their count)")
        opt("--sync-replica-number", type=int,
            help="synchronous replicas, 0..nodes-1 (default min(1, nodes - 1))")
        add_body_options(sub)
    verb("delete", "delete an instance with its users and databases",
         on_item_or_collection(handlers["delete"], INSTANCES))
    verb("replication", "how clients connect (a postgresql:// URI without password), the "
                        "primary and each member's lag", cmd_replication,
         epilog="appliance sqldb instances replication shop")


def cmd_replication(args, env):
    """The instance's `replication` action: the URI, then one line per member."""
    shown, path = read_action(args, env, INSTANCES, "replication")
    if getattr(args, "json", False):
        emit(args, env, shown, path)
        return 0
    lines = [f"uri: {shown.get('uri') or '(no endpoint yet)'}",
             f"epoch: {shown.get('epoch')}"]
    for m in shown.get("members") or []:
        lag = "-" if m.get("lag_bytes") is None else f"{m['lag_bytes']} bytes behind"
        lines.append(f"{m['role']:8} {m.get('name') or m['node']} {m.get('address') or '-'} "
                     f"{m.get('status') or '-'} {lag}")
    env.stdout.write("\n".join(lines) + "\n")
    return 0


def _write_instance(method):
    def handler(args, env):
        client = session_client(args, env)
        item = resolve(client, INSTANCES, args.ref) if method == "PUT" else None
        body = _given(args, (("name", "name"), ("description", "description"),
                             ("cpu", "cpu"), ("ram", "ram"),
                             ("disk_size", "disk_size"), ("nodes_number", "nodes_number"),
                             ("sync_replica_number", "sync_replica_number")))
        if args.client_networks is not None:
            given = args.client_networks.strip()
            body["client_networks"] = None if given == "default" else \
                [n.strip() for n in given.split(",") if n.strip()]
        if getattr(args, "version", None):
            body["version"] = _uuid(resolve(client, VERSIONS, args.version))
        if getattr(args, "node", None):
            nodes = [_uuid(resolve(client, NODES, n)) for n in args.node]
            body["placement"] = {"kind": "nodes", "nodes": nodes}
            body.setdefault("nodes_number", len(nodes))
        with_given_fields(body, args, env, method)
        sent = update(client, item, body) if item else \
            create(client, INSTANCES, body, getattr(args, "project", None))
        return emit_after_wait(args, env, client, INSTANCES + sent["uuid"], sent, WAITS_FOR)
    return handler


# ---- users and databases ----------------------------------------------------------------

def _child_adder(verbs, common, name, noun):
    def verb(word, summary, handler, item=True, aliases=(), epilog=None):
        sub = verbs.add_parser(word, help=summary, description=summary,
                               aliases=list(aliases), parents=[common],
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=f"example:\n  {epilog}" if epilog else None)
        sub.add_argument("instance", metavar="INSTANCE", help="the instance's UUID or name")
        if item:
            sub.add_argument("ref", metavar="NAME-OR-UUID", help=f"the {noun}'s UUID or name")
        sub.set_defaults(handler=handler, child=name)
        return sub
    return verb


def _child_collection(client, args):
    return f"{resolve(client, INSTANCES, args.instance)}/{args.child}/"


def _child_generic(generic):
    def handler(args, env):
        client = session_client(args, env)
        collection = _child_collection(client, args)
        ref = getattr(args, "ref", None)
        args.path = resolve(client, collection, ref) if ref else collection
        return generic(args, env)
    return handler


def _child_reads(verb, name, noun, handlers):
    add_list_arguments(verb("list", f"list the {name} of an instance",
                            _child_generic(handlers["list"]), item=False))
    verb("show", f"show a {noun}", _child_generic(handlers["show"]))
    verb("delete", f"delete a {noun}", _child_generic(handlers["delete"]))


def _users(verbs, common, handlers):
    verb = _child_adder(verbs, common, "users", "user")
    _child_reads(verb, "users", "user", handlers)
    add = verb("add", "add a user (a PostgreSQL role that logs in with its password)",
               _write_user("POST"), item=False, aliases=("create",),
               epilog="appliance sqldb users add shop -n alice     # prompts, twice")
    update = verb("update", "change a user's description or password",
                  _write_user("PUT"),
                  epilog="appliance sqldb users update shop alice --password   # prompts")
    for sub in (add, update):
        if sub is add:
            sub.add_argument("-n", "--name", help="a role name: a letter or _, then "
                                                  "letters, digits, _ and $ (<= 63); not "
                                                  "pg_*, dbaas_*, postgres")
        sub.add_argument("-D", "--description")
        secret = sub.add_mutually_exclusive_group()
        secret.add_argument("--password", nargs="?", const=PROMPT, metavar="PASSWORD",
                            help="8..99 characters; without a value (and on add when "
                                 "left out) it is prompted for, not echoed. Kept only as "
                                 "a SCRAM-SHA-256 verifier")
        secret.add_argument("--password-stdin", action="store_true",
                            help="read the password from stdin")
        _body_options(sub)


def _password(args, env, wanted):
    if args.password_stdin:
        password = env.stdin.read().rstrip("\r\n")
    elif args.password is PROMPT or (wanted and args.password is None):
        if not env.stdin_isatty:
            raise UsageError("no password: give --password PASSWORD or --password-stdin "
                             "(there is no terminal to prompt on)")
        try:
            password = env.getpass("Password: ")
            again = env.getpass("Password again: ")
        except EOFError:
            raise UsageError("no password given") from None
        if password != again:
            raise UsageError("the two passwords differ")
    else:
        password = args.password
    if password is not None and not password:
        raise UsageError("empty password")
    return password


def _write_user(method):
    def handler(args, env):
        client = session_client(args, env)
        collection = _child_collection(client, args)
        item = resolve(client, collection, args.ref) if method == "PUT" else None
        body = _given(args, (("name", "name"), ("description", "description")))
        password = _password(args, env, wanted=method == "POST" and not args.data and
                             not any(f.startswith("password") for f in args.fields))
        if password is not None:
            body["password"] = password
        with_given_fields(body, args, env, method)
        sent = client.request(method, item or collection, body=body).payload()
        return emit_after_wait(args, env, client, collection + sent["uuid"], sent, WAITS_FOR)
    return handler


def _databases(verbs, common, handlers):
    verb = _child_adder(verbs, common, "databases", "database")
    _child_reads(verb, "databases", "database", handlers)
    add = verb("add", "add a database owned by a user of the instance",
               _write_database("POST"), item=False, aliases=("create",),
               epilog="appliance sqldb databases add shop -n orders --owner alice")
    update = verb("update", "change a database's owner or description",
                  _write_database("PUT"),
                  epilog="appliance sqldb databases update shop orders --owner bob")
    for sub in (add, update):
        if sub is add:
            sub.add_argument("-n", "--name", help="an SQL identifier: a letter or _, then "
                                                  "letters, digits and _ (<= 63)")
        sub.add_argument("-D", "--description")
        sub.add_argument("--owner", metavar="USER", help="a user of the instance (UUID or "
                                                         "name)")
        _body_options(sub)


def _write_database(method):
    def handler(args, env):
        client = session_client(args, env)
        instance = resolve(client, INSTANCES, args.instance)
        collection = f"{instance}/databases/"
        item = resolve(client, collection, args.ref) if method == "PUT" else None
        body = _given(args, (("name", "name"), ("description", "description")))
        if args.owner:
            body["owner"] = _uuid(resolve(client, f"{instance}/users/", args.owner))
        with_given_fields(body, args, env, method)
        sent = client.request(method, item or collection, body=body).payload()
        return emit_after_wait(args, env, client, collection + sent["uuid"], sent, WAITS_FOR)
    return handler


COLLECTIONS = {
    "versions": ("PostgreSQL versions instances are made from (administrators write them)",
                 _versions),
    "instances": ("PostgreSQL instances: a primary with streaming replicas", _instances),
    "users": ("the users (login roles) of an instance", _users),
    "databases": ("the databases of an instance", _databases),
}
