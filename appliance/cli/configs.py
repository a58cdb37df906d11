"""`appliance config ...`: files the node agent writes on nodes (/v1/config/configs/).

The generic verbs with the collection filled in (as compute.py does), options for what a
config is made of (`--path`, `--node`, `--content @FILE`, `--template` with `--var`,
`--mode`, `--owner`, `--group`, `--on-change`), and the reference CLI's `add-from-env`
(an env file and `GCT_CFG_TEXT_<n>`/`GCT_CFG_PATH_<n>` pairs from the environment) and
`delete --node` (every config that targets the node).
"""

import argparse
import base64
import binascii
import json
import uuid as uuidlib
from pathlib import Path

from . import CliError, UsageError
from .common import (add_body_options, add_list_arguments, add_project_option,
                     add_wait_options, create, fields_epilog, session_client,
                     split_field, update, verb_adder, with_given_fields)
from .groups import emit_after_wait, on_item_or_collection, resolve, show_or_wait

WAITS_FOR = "the node agents to write the file"
OPTION_OF_FIELD = {"name": "-n/--name", "description": "-D/--description",
                   "project_id": "-p/--project", "path": "--path",
                   "target": "--node, --node-set", "body": "--content, --template, --var",
                   "mode": "--mode", "owner": "--owner", "group": "--group",
                   "on_change": "--on-change, --no-on-change"}

CONFIGS = "/v1/config/configs/"
NODES, SETS = "/v1/compute/nodes/", "/v1/compute/sets/"
# the reference CLI's values (reference-api.md section 7)
ENV_PATH, ENV_PREFIX, CFG_PREFIX = "/var/lib/exordos/app.env", "GCT_ENV_", "GCT_CFG_"


def add_group(commands, common, make_parser, handlers):
    group = commands.add_parser(
        "config", aliases=["configs"], help="files delivered to nodes by the node agent",
        description="configs: /v1/config/configs/", parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  appliance config add -p PROJECT --node web --path /etc/app.conf "
               "--content @app.conf\n  appliance config add --node web --path /etc/db.conf "
               "--template 'pw={{ pw }}' --var 'pw=$core.secret.passwords.$<uuid>:value'")
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True,
                                 parser_class=make_parser)

    verb = verb_adder(verbs, common, "config")

    add_list_arguments(verb("list", "list configs",
                            on_item_or_collection(handlers["list"], CONFIGS), item=False))
    add_wait_options(verb("show", "show a config (with its status on each node)",
                          show_or_wait(handlers["show"], CONFIGS, WAITS_FOR)), WAITS_FOR)
    add = verb("add", "add a config", _write("POST"), item=False, aliases=("create",))
    add.epilog = fields_epilog("appliance config add --node web --path /etc/motd --content "
                               "'hello' --wait", CONFIGS, OPTION_OF_FIELD)
    update = verb("update", "change fields of a config", _write("PUT"),
                  epilog="appliance config update motd --mode 0600")
    for sub in (add, update):
        _options(sub, create=sub is add)
        add_wait_options(sub, WAITS_FOR)
    delete = verb("delete", "delete a config, or with --node every config targeting a node",
                  cmd_delete, item=False, epilog="appliance config delete motd")
    delete.add_argument("ref", metavar="NAME-OR-UUID", nargs="?")
    delete.add_argument("--node", metavar="NODE", help="delete every config targeting NODE")
    env = verb("add-from-env", "add configs from environment variables (the reference "
                               "CLI's)", cmd_add_from_env, item=False,
               epilog="GCT_ENV_PORT=80 GCT_CFG_TEXT_MOTD=hi GCT_CFG_PATH_MOTD=/etc/motd "
                      "appliance config add-from-env -p PROJECT web")
    add_project_option(env)
    env.add_argument("node", metavar="NODE", help="the node's UUID or name")
    env.add_argument("--env-prefix", default=ENV_PREFIX)
    env.add_argument("--env-path", default=ENV_PATH)
    env.add_argument("--env-format", choices=["env", "json"], default="env")
    env.add_argument("--cfg-prefix", default=CFG_PREFIX)
    env.add_argument("--base64", action="store_true",
                     help="the GCT_CFG_TEXT_<n> values are base64")
    env.add_argument("-u", "--uuid", help="UUID of the env file's config")


def _options(sub, create):
    opt = sub.add_argument
    opt("-n", "--name")
    opt("-D", "--description")
    if create:
        add_project_option(sub)
    opt("--path", help="absolute path of the file on the node")
    target = sub.add_mutually_exclusive_group()
    target.add_argument("--node", metavar="NODE", action="append",
                        help="a node (UUID or name); repeat for several")
    target.add_argument("--node-set", metavar="SET", help="every node of a set")
    body = sub.add_mutually_exclusive_group()
    body.add_argument("--content", metavar="TEXT|@FILE", help="the file's text")
    body.add_argument("--template", metavar="TEXT|@FILE",
                      help="a template: {{ name }} is replaced by the variable name")
    opt("--var", metavar="NAME=VALUE", action="append", default=[],
        help="a template variable: NAME=text, NAME:=json, or NAME=$core.<service>."
             "<collection>.$<uuid>:field (a link)")
    opt("--mode", help="octal, e.g. 0640 (default 0644)")
    opt("--owner")
    opt("--group")
    on_change = sub.add_mutually_exclusive_group()
    on_change.add_argument("--on-change", metavar="COMMAND",
                           help="a shell command run on the node after each change")
    on_change.add_argument("--no-on-change", action="store_true", help="run nothing")
    add_body_options(sub)


def _text(spec):
    if spec.startswith("@"):
        try:
            return Path(spec[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {spec[1:]}: {exc.strerror}") from None
    return spec


def _variables(items):
    out = {}
    for item in items:
        key, is_json, raw = split_field(item)
        try:
            out[key] = json.loads(raw) if is_json else raw
        except ValueError:
            raise UsageError(f"--var {key}:= needs a JSON value, got {raw!r}") from None
    return out


def _target(client, args):
    if args.node_set:
        return {"kind": "node_set", "node_set": _uuid(resolve(client, SETS, args.node_set))}
    if args.node:
        nodes = [_uuid(resolve(client, NODES, ref)) for ref in args.node]
        if len(nodes) == 1:
            return {"kind": "node", "node": nodes[0]}
        return {"kind": "nodes", "nodes": nodes}
    return None


def _uuid(path):
    return path.rstrip("/").rsplit("/", 1)[1]


def _write(method):
    def handler(args, env):
        client = session_client(args, env)
        item = resolve(client, CONFIGS, args.ref) if method == "PUT" else None
        body = {field: getattr(args, opt) for opt, field in (
            ("name", "name"), ("description", "description"), ("path", "path"), ("mode", "mode"), ("owner", "owner"), ("group", "group"))
            if getattr(args, opt, None) is not None}
        target = _target(client, args)
        if target:
            body["target"] = target
        if args.on_change is not None:
            body["on_change"] = {"kind": "shell", "command": args.on_change}
        if args.no_on_change:
            body["on_change"] = {"kind": "no_action"}
        if args.content is not None:
            if args.var:
                raise UsageError("--var goes with --template, not --content")
            body["body"] = {"kind": "text", "content": _text(args.content)}
        elif args.template is not None or args.var:
            variables = _variables(args.var)
            if args.template is None:
                current = client.request("GET", item).payload()["body"] if item else {}
                if current.get("kind") != "template":
                    raise UsageError("--var needs --template (the config is not a template)")
                template, variables = current["template"], {**current["variables"],
                                                            **variables}
            else:
                template = _text(args.template)
            body["body"] = {"kind": "template", "template": template, "variables": variables}
        with_given_fields(body, args, env, method)
        sent = update(client, item, body) if item else \
            create(client, CONFIGS, body, getattr(args, "project", None))
        return emit_after_wait(args, env, client, CONFIGS + sent["uuid"], sent, WAITS_FOR)
    return handler



def cmd_delete(args, env):
    client = session_client(args, env)
    if (args.ref is None) == (args.node is None):
        raise UsageError("give a config (NAME-OR-UUID) or --node NODE, not both")
    if args.ref is not None:
        paths = [resolve(client, CONFIGS, args.ref)]
    else:
        node = _uuid(resolve(client, NODES, args.node))
        # every target kind that names the node (the reference reads target["node"] only
        # and fails on a set target)
        paths = [CONFIGS + c["uuid"] for c in client.request("GET", CONFIGS).payload()
                 if node in (c["target"].get("node"), *(c["target"].get("nodes") or ()))]
    for path in paths:
        client.request("DELETE", path).payload()
        env.stdout.write(f"deleted {path}\n")
    return 0


def cmd_add_from_env(args, env):
    client = session_client(args, env)
    node = _uuid(resolve(client, NODES, args.node))
    target = {"kind": "node", "node": node}
    envs = {k[len(args.env_prefix):]: v for k, v in sorted(env.environ.items())
            if k.startswith(args.env_prefix)}
    configs = {}
    for key, value in sorted(env.environ.items()):
        if not key.startswith(args.cfg_prefix):
            continue
        kind, _, name = key[len(args.cfg_prefix):].partition("_")
        if kind not in ("TEXT", "PATH") or not name:
            raise UsageError(f"{key}: expected {args.cfg_prefix}TEXT_<name> or "
                             f"{args.cfg_prefix}PATH_<name>")
        configs.setdefault(name, {})[kind] = value
    for name, pair in configs.items():
        if set(pair) != {"TEXT", "PATH"}:
            raise UsageError(f"config {name}: needs both {args.cfg_prefix}TEXT_{name} and "
                             f"{args.cfg_prefix}PATH_{name}")
        if args.base64:
            try:
                pair["TEXT"] = base64.b64decode(pair["TEXT"], validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise UsageError(f"{args.cfg_prefix}TEXT_{name} is not base64 of UTF-8 "
                                 "text") from None
    if not envs and not configs:
        raise CliError(f"no {args.env_prefix}* or {args.cfg_prefix}* variables in the "
                       "environment")
    bodies = []
    if envs:
        content = "\n".join(f"{k}={v}" for k, v in envs.items()) + "\n" \
            if args.env_format == "env" else json.dumps(envs, indent=2)
        bodies.append({"uuid": args.uuid or str(uuidlib.uuid4()), "name": "envs",
                       "path": args.env_path})
        bodies[-1]["body"] = {"kind": "text", "content": content}
    for name, pair in configs.items():
        bodies.append({"name": name, "path": pair["PATH"],
                       "body": {"kind": "text", "content": pair["TEXT"]}})
    for body in bodies:
        sent = create(client, CONFIGS, {**body, "target": target}, args.project)
        env.stdout.write(f"saved {sent['path']} ({CONFIGS}{sent['uuid']})\n")
    return 0
