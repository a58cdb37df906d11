"""`appliance lb ...`: load balancers (/v1/network/lb/) with their vhosts, routes and
backend pools (docs/lb.md).

An LB is named by its UUID or name; its children by UUID or name under their parent, so
`appliance lb vhosts add web --domain a.example` adds a vhost to the LB `web`. Options
build the reference CLI's bodies (`--pool`, `--kind`, `--value`, `--allowed-ip`,
`--backend-protocol`, `--cert/--key`, `--disabled`), ours add `--certificate`,
`--redirect-http`, endpoints by node or node set, and the LB's `--type`; key=value fields
and `--data` override them, as in the other groups.
"""

import argparse
import json
from pathlib import Path

from . import UsageError
from .common import (add_body_options, add_list_arguments, add_project_option,
                     add_wait_options, create, emit, fields_epilog, session_client, update,
                     verb_adder, with_given_fields)
from .groups import (emit_after_wait, on_item_or_collection, read_action, resolve,
                     show_or_wait, wait_active)

LBS = "/v1/network/lb/"
NODES, SETS = "/v1/compute/nodes/", "/v1/compute/sets/"
WAITS_FOR = "the LB's nodes to apply it"
OPTION_OF_FIELD = {"name": "-n/--name", "description": "-D/--description",
                   "project_id": "-p/--project", "type": "--type, --node, --cpu, --ram, "
                   "--disk-size, --nodes-number", "protocol": "--protocol", "port": "--port",
                   "domains": "--domain", "cert": "--certificate [--key]",
                   "redirect_http": "--redirect-http",
                   "proxy_protocol_from": "--proxy-protocol-from", "condition": "--pool, "
                   "--kind, --value, --backend-protocol, --allowed-ip, --condition",
                   "endpoints": "--host, --node, --node-set", "enabled": "--disabled, --enabled"}


def add_group(commands, common, make_parser, handlers):
    group = commands.add_parser(
        "lb", help="load balancers: vhosts, routes, backend pools (nginx on a node)",
        description="load balancers: /v1/network/lb/ and its vhosts, routes and "
                    "backend_pools", parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  appliance lb add -n web --wait\n"
               "  appliance lb pools add web --host 10.0.0.5:8080 --host "
               "10.0.0.6:8080 -n app\n"
               "  appliance lb vhosts add web --domain www.example.test --port 80 -n www\n"
               "  appliance lb routes add web www --pool app --value /\n"
               "  appliance lb info web")
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True,
                                 parser_class=make_parser)
    verb = verb_adder(verbs, common, "load balancer")
    add_list_arguments(verb("list", "list load balancers",
                            on_item_or_collection(handlers["list"], LBS),
                            item=False))
    _waiting(verb("show", "show a load balancer (status, ipsv4, node_status)",
                  show_or_wait(handlers["show"], LBS, WAITS_FOR)))
    add = _waiting(verb("add", "add a load balancer", _write_lb("POST"), item=False,
                        aliases=("create",)))
    add.epilog = fields_epilog("appliance lb add -n web --type external_node --node n1",
                               LBS, OPTION_OF_FIELD)
    update = _waiting(verb("update", "change fields of a load balancer", _write_lb("PUT"),
                           epilog="appliance lb update web --type core --nodes-number 2"))
    for sub in (add, update):
        _lb_options(sub, create=sub is add)
    verb("delete", "delete a load balancer with its vhosts, routes and pools",
         on_item_or_collection(handlers["delete"], LBS))
    verb("info", "the load balancer with its vhosts, their routes, and its pools",
         cmd_info, epilog="appliance lb info web")
    # `routes` is the routes collection's word: this is the API's `routes` action
    verb("rendered", "what nginx gets for the load balancer: its routes, then the "
                     "rendered text", cmd_routes, epilog="appliance lb rendered web")
    for name, spec in CHILDREN.items():
        summary, parents, example = spec
        coll = verbs.add_parser(name, aliases=spec_aliases(name), help=summary,
                                description=f"{summary}: {child_path_help(name)}",
                                parents=[common])
        child_verbs = coll.add_subparsers(dest="child_verb", metavar="VERB", required=True,
                                          parser_class=make_parser)
        _child_verbs(child_verbs, common, name, parents, example, handlers)


# name -> (summary, parent arguments, an add example)
CHILDREN = {
    "vhosts": ("the protocols, ports and domains an LB listens on", ("lb",),
               "appliance lb vhosts add web --protocol https --port 443 --domain a.example "
               "--certificate tls --redirect-http"),
    "routes": ("what a vhost does with requests", ("lb", "vhost"),
               "appliance lb routes add web www --pool app --kind prefix --value /api/"),
    "pools": ("the endpoints an LB balances over (backend_pools)", ("lb",),
              "appliance lb pools add web -n app --host 10.0.0.5:8080 --node n1:8080"),
}


def spec_aliases(name):
    return ["backend-pools", "backend_pools"] if name == "pools" else []


def child_path_help(name):
    return {"vhosts": "/v1/network/lb/<LB>/vhosts/",
            "routes": "/v1/network/lb/<LB>/vhosts/<VHOST>/routes/",
            "pools": "/v1/network/lb/<LB>/backend_pools/"}[name]


def _waiting(sub):
    return add_wait_options(sub, WAITS_FOR + " (for a vhost, route or pool: its LB)")


def _lb_options(sub, create):
    opt = sub.add_argument
    opt("-n", "--name")
    opt("-D", "--description")
    if create:
        add_project_option(sub)
    opt("--type", choices=["core_agent", "external_node", "core"],
        help="where nginx runs: the appliance itself (admin project only, its default "
             "there), a node of the project (--node), or a node set of its own (a "
             "project's default)")
    opt("--node", metavar="NODE", help="external_node: the node's UUID or name")
    opt("--cpu", type=int, help="core: cores per node (1)")
    opt("--ram", type=int, help="core: MB per node (512)")
    opt("--disk-size", type=int, help="core: GB per node (10)")
    opt("--nodes-number", type=int, help="core: how many nodes (1)")
    _body_options(sub)


def _body_options(sub):
    add_body_options(sub)


def _lb_type(client, args):
    core = {k: v for k, v in (("cpu", args.cpu), ("ram", args.ram),
                              ("disk_size", args.disk_size),
                              ("nodes_number", args.nodes_number)) if v is not None}
    kind = args.type or ("external_node" if args.node else "core" if core else None)
    if kind is None:
        return None
    if core and kind != "core":
        raise UsageError("--cpu, --ram, --disk-size and --nodes-number go with --type core")
    if kind == "external_node":
        if not args.node:
            raise UsageError("--type external_node needs --node NODE")
        return {"kind": kind, "external_node": _uuid(resolve(client, NODES, args.node))}
    if args.node:
        raise UsageError(f"--node goes with --type external_node, not {kind}")
    return {"kind": kind, **core}


def _write_lb(method):
    def handler(args, env):
        client = session_client(args, env)
        item = resolve(client, LBS, args.ref) if method == "PUT" else None
        body = _named(args)
        spec = _lb_type(client, args)
        if spec is not None:
            body["type"] = spec
        with_given_fields(body, args, env, method)
        sent = update(client, item, body) if item else \
            create(client, LBS, body, getattr(args, "project", None))
        return emit_after_wait(args, env, client, LBS + sent["uuid"], sent, WAITS_FOR)
    return handler


def _named(args):
    body = {field: getattr(args, opt) for opt, field in (
        ("name", "name"), ("description", "description"))
        if getattr(args, opt, None) is not None}
    if getattr(args, "disabled", False):
        body["enabled"] = False
    if getattr(args, "enabled", False):
        body["enabled"] = True
    return body



def _uuid(path):
    return path.rstrip("/").rsplit("/", 1)[1]




def cmd_info(args, env):
    """The reference CLI's `info`: the LB, then its vhosts with their routes, and its
    pools, as one object."""
    client = session_client(args, env)
    lb = resolve(client, LBS, args.ref)
    shown = client.request("GET", lb).payload()
    vhosts = client.request("GET", f"{lb}/vhosts/").payload()
    for vhost in vhosts:
        vhost["routes"] = client.request("GET", f"{lb}/vhosts/{vhost['uuid']}/routes/"
                                         ).payload()
    info = {**shown, "vhosts": vhosts,
            "backend_pools": client.request("GET", f"{lb}/backend_pools/").payload()}
    if getattr(args, "json", False):
        emit(args, env, info, lb)
        return 0
    env.stdout.write(render_info(info))
    return 0


def cmd_routes(args, env):
    """The LB's `routes` action: one line per route (port, domains, match, backends),
    then the nginx text its nodes get."""
    shown, path = read_action(args, env, LBS, "routes")
    if getattr(args, "json", False):
        emit(args, env, shown, path)
        return 0
    out = []
    for route in shown.get("routes") or []:
        backends = ", ".join(f"{e['host']}:{e['port']}" for b in route["backends"]
                             for e in b["endpoints"]) or "-"
        out.append(f"{route['protocol']}:{route['port']} {','.join(route['domains'] or [])}"
                   f" {route['match']} {route['value'] or ''} -> {backends}".replace("  ", " "))
    for line in (shown.get("refused") or []):
        out.append(f"refused: {line}")
    for key in ("unavailable", "render_error"):
        if shown.get(key):
            out.append(f"{key.replace('_', ' ')}: {shown[key]}")
    text = shown.get("nginx") or {}
    for part in ("http", "stream"):
        if text.get(part):
            out.append(f"\n# ---- {part} {{}} ----\n{text[part].rstrip()}")
    env.stdout.write("\n".join(out) + "\n")
    return 0


def _flag(item):
    return "" if item.get("enabled", True) else " (disabled)"


def _describe_condition(condition, pools):
    condition = condition or {}
    actions = condition.get("actions") or []
    to = ", ".join(pools.get(a.get("pool"), a.get("pool") or "?") +
                   (f" ({a['protocol']['kind']})" if isinstance(a.get("protocol"), dict) else "")
                   for a in actions if a.get("kind") == "backend") or \
        ", ".join(a.get("kind", "?") for a in actions) or "-"
    match = "everything" if condition.get("kind") == "raw" else \
        f"{condition.get('kind')} {condition.get('value')}"
    allowed = condition.get("allowed_ips")
    return f"{match} -> {to}" + (f", from {', '.join(allowed)}" if allowed else "")


def _describe_endpoint(endpoint):
    kind = endpoint.get("kind")
    where = endpoint.get(kind)
    where = where.rsplit("/", 1)[-1] if isinstance(where, str) else where
    label = {"node": "node ", "node_set": "node set "}.get(kind, "")
    weight = f" weight {endpoint['weight']}" if endpoint.get("weight") is not None else ""
    return f"{label}{where}:{endpoint.get('port')}{weight}"


def render_info(info):
    """`lb info` for people: the LB, each vhost with its routes, each pool with its
    endpoints, one line each (--json has the whole object)."""
    kind = (info.get("type") or {}).get("kind", "?")
    lines = [f"load balancer {info.get('name') or info.get('uuid')}  {info.get('status')}"
             f"  type {kind}  {info.get('uuid')}"]
    if info.get("status_reason"):
        lines.append(f"  reason: {info['status_reason']}")
    if info.get("ipsv4"):
        lines.append(f"  addresses: {', '.join(map(str, info['ipsv4']))}")
    pools = {p["uuid"]: p.get("name") or p["uuid"] for p in info.get("backend_pools", [])}
    lines.append("vhosts:" if info.get("vhosts") else "vhosts: (none)")
    for vhost in info.get("vhosts", []):
        cert = vhost.get("cert") or {}
        tls = f"  cert {cert.get('certificate', '').rsplit('/', 1)[-1] or cert.get('kind')}" \
            if cert else ""
        domains = ", ".join(vhost.get("domains") or []) or "any name"
        lines.append(f"  {vhost.get('name') or vhost['uuid']}: {vhost.get('protocol')} port "
                     f"{vhost.get('port')}  {domains}{tls}{_flag(vhost)}")
        for route in vhost.get("routes", []):
            lines.append(f"    route {route.get('name') or route['uuid']}: "
                         f"{_describe_condition(route.get('condition'), pools)}{_flag(route)}")
    lines.append("pools:" if info.get("backend_pools") else "pools: (none)")
    for pool in info.get("backend_pools", []):
        endpoints = ", ".join(_describe_endpoint(e) for e in pool.get("endpoints") or []) \
            or "(no endpoints)"
        lines.append(f"  {pool.get('name') or pool['uuid']}: {endpoints}")
    return "\n".join(lines) + "\n"


# ---- children ---------------------------------------------------------------------------

def _child_verbs(verbs, common, name, parents, example, handlers):
    noun = {"vhosts": "vhost", "routes": "route", "pools": "pool"}[name]

    def verb(word, summary, handler, item=True, aliases=(), epilog=None):
        sub = verbs.add_parser(word, help=summary, description=summary,
                               aliases=list(aliases), parents=[common],
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=f"example:\n  {epilog}" if epilog else None)
        sub.add_argument("lb", metavar="LB", help="the load balancer's UUID or name")
        if "vhost" in parents:
            sub.add_argument("vhost", metavar="VHOST", help="the vhost's UUID or name")
        if item:
            sub.add_argument("ref", metavar="NAME-OR-UUID", help=f"the {noun}'s UUID or name")
        sub.set_defaults(handler=handler, child=name)
        return sub

    add_list_arguments(verb("list", f"list the {name}", _child_generic(handlers["list"]),
                            item=False))
    verb("show", f"show a {noun}", _child_generic(handlers["show"]))
    add = verb("add", f"add a {noun}", _child_write("POST"), item=False, aliases=("create",),
               epilog=example)
    update = verb("update", f"change fields of a {noun}", _child_write("PUT"))
    add.epilog = fields_epilog(example, child_path_help(name).replace("<LB>", "<lb>").replace(
        "<VHOST>", "<vhost>"), OPTION_OF_FIELD)
    for sub in (add, update):
        sub.add_argument("-n", "--name")
        sub.add_argument("-D", "--description")
        OPTIONS[name](sub, create=sub is add)
        _body_options(sub)
        _waiting(sub)
    verb("delete", f"delete a {noun}", _child_generic(handlers["delete"]))


def _vhost_options(sub, create):
    opt = sub.add_argument
    if create:
        opt("--protocol", choices=["http", "https", "tcp", "udp"],
            help="http (default), https, tcp or udp; fixed once made")
    opt("--port", type=int, help="default 80")
    opt("--domain", metavar="NAME", action="append",
        help="a domain (http, https); repeat for several")
    opt("--certificate", "--cert", dest="cert", metavar="CERT",
        help="https: a certificate of /v1/secret/certificates/ (name or UUID); with --key, "
             "a file with the PEM chain instead (--cert FILE --key FILE, the reference "
             "CLI's)")
    opt("--key", metavar="FILE", help="https: the PEM private key of --cert FILE")
    opt("--redirect-http", action="store_true",
        help="https: answer plain HTTP on port 80 with a redirect")
    opt("--proxy-protocol-from", metavar="NET", help="accept the PROXY protocol from NET")
    _enabled_options(sub)


def _route_options(sub, create):
    opt = sub.add_argument
    opt("--pool", metavar="POOL", help="the backend pool (UUID or name) of the route")
    opt("--kind", choices=["prefix", "exact", "regex", "raw"],
        help="prefix (default for http/https), exact, regex; raw for tcp/udp")
    opt("--value", help="the path prefix, exact path or regex (default /)")
    opt("--backend-protocol", choices=["http", "https"], help="default http")
    opt("--allowed-ip", metavar="NET", action="append",
        help="a client network allowed (default 0.0.0.0/0); repeat for several")
    opt("--condition", metavar="JSON|@FILE", help="the whole condition (replaces --pool "
                                                  "and the rest)")
    _enabled_options(sub)


def _pool_options(sub, create):
    opt = sub.add_argument
    opt("--host", metavar="HOST:PORT[:WEIGHT]", action="append", default=[],
        help="an endpoint by address or name; repeat for several")
    opt("--node", metavar="NODE:PORT[:WEIGHT]", action="append", default=[],
        help="a node of the project (followed as its address changes)")
    opt("--node-set", metavar="SET:PORT[:WEIGHT]", action="append", default=[],
        help="every node of a set of the project")


def _enabled_options(sub):
    state = sub.add_mutually_exclusive_group()
    state.add_argument("--disabled", action="store_true", help="left out of nginx")
    state.add_argument("--enabled", action="store_true", help="served again")


OPTIONS = {"vhosts": _vhost_options, "routes": _route_options, "pools": _pool_options}


def _collection(client, args, name):
    lb = resolve(client, LBS, args.lb)
    if name == "vhosts":
        return f"{lb}/vhosts/", lb
    if name == "pools":
        return f"{lb}/backend_pools/", lb
    vhost = resolve(client, f"{lb}/vhosts/", args.vhost)
    return f"{vhost}/routes/", lb


def _child_generic(generic):
    def handler(args, env):
        client = session_client(args, env)
        collection, _lb = _collection(client, args, args.child)
        ref = getattr(args, "ref", None)
        args.path = resolve(client, collection, ref) if ref else collection
        return generic(args, env)
    return handler


def _child_write(method):
    def handler(args, env):
        client = session_client(args, env)
        collection, lb = _collection(client, args, args.child)
        item = resolve(client, collection, args.ref) if method == "PUT" else None
        body = _named(args)
        BODIES[args.child](client, args, body, lb, item)
        with_given_fields(body, args, env, method)
        sent = update(client, item, body) if item else create(client, collection, body)
        if getattr(args, "wait", False):
            # a vhost, route or pool has no status of its own: its LB applies it
            wait_active(client, lb, env, args.wait_timeout, WAITS_FOR)
        emit(args, env, sent, collection + sent["uuid"])
        return 0
    return handler


def _read(path):
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def _vhost_body(client, args, body, lb, item):
    for opt, field in (("protocol", "protocol"), ("port", "port"),
                       ("proxy_protocol_from", "proxy_protocol_from")):
        if getattr(args, opt, None) is not None:
            body[field] = getattr(args, opt)
    if args.domain:
        body["domains"] = args.domain
    if args.key is not None:
        if args.cert is None:
            raise UsageError("--cert and --key go together: --key FILE is the key of "
                             "--cert FILE")
        body["cert"] = {"kind": "raw", "crt": _read(args.cert), "key": _read(args.key)}
    elif args.cert is not None:
        if Path(args.cert).is_file():
            raise UsageError(f"--cert and --key go together: {args.cert} is a file, so give "
                             "its key with --key FILE (without --key, --cert names a "
                             "certificate of `appliance secret certificates`)")
        cert = resolve(client, "/v1/secret/certificates/", args.cert)
        body["cert"] = {"kind": "certificate", "certificate": _uuid(cert)}
    if args.redirect_http:
        body["redirect_http"] = True


def _route_body(client, args, body, lb, item):
    if args.condition is not None:
        text = _read(args.condition[1:]) if args.condition.startswith("@") else args.condition
        try:
            body["condition"] = json.loads(text)
        except ValueError:
            raise UsageError("--condition needs a JSON object") from None
        return
    given = [args.pool, args.kind, args.value, args.backend_protocol, args.allowed_ip]
    if all(v is None for v in given):
        if item is None:
            raise UsageError("a route needs --pool POOL (or --condition JSON)")
        return
    if args.pool is None:
        raise UsageError("--kind, --value, --backend-protocol and --allowed-ip go with "
                         "--pool (a condition is replaced whole)")
    pool = _uuid(resolve(client, f"{lb}/backend_pools/", args.pool))
    kind = args.kind or "prefix"
    if kind == "raw":
        if args.value or args.backend_protocol:
            raise UsageError("a raw route takes no --value nor --backend-protocol")
        condition = {"kind": "raw", "actions": [{"kind": "backend", "pool": pool}]}
    else:
        condition = {"kind": kind, "value": args.value or "/", "actions": [{
            "kind": "backend", "pool": pool,
            "protocol": {"kind": args.backend_protocol or "http"}}]}
    if args.allowed_ip:
        condition["allowed_ips"] = args.allowed_ip
    body["condition"] = condition


def _pool_body(client, args, body, lb, item):
    endpoints = [_endpoint("host", text, "--host") for text in args.host]
    endpoints += [_endpoint("node", text, "--node", client, NODES) for text in args.node]
    endpoints += [_endpoint("node_set", text, "--node-set", client, SETS)
                  for text in args.node_set]
    if endpoints:
        body["endpoints"] = endpoints


def _endpoint(kind, text, option_name, client=None, collection=None):
    ref, port, weight = _split_endpoint(text, option_name)
    out = {"kind": kind}
    out[kind] = _uuid(resolve(client, collection, ref)) if client else ref
    out["port"] = port
    if weight is not None:
        out["weight"] = weight
    return out


def _split_endpoint(text, option_name):
    """NAME:PORT[:WEIGHT], the name possibly an [IPv6] address."""
    head, rest = (text[1:].split("]", 1) if text.startswith("[") else ("", text))
    parts = rest.split(":") if not head else rest.lstrip(":").split(":")
    name = head or parts.pop(0)
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if not name or len(numbers) not in (1, 2) or len(numbers) != len(parts):
        raise UsageError(f"{option_name} takes NAME:PORT[:WEIGHT], got {text!r}")
    return name, numbers[0], numbers[1] if len(numbers) == 2 else None


BODIES = {"vhosts": _vhost_body, "routes": _route_body, "pools": _pool_body}
