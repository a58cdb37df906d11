"""The platform side of LBs: what each node gets (`for_node`, the producer of kind `lb` in
appliance/agent/capabilities.py). One item per (node the LB is placed on, LB); its value
is the LB fully resolved (the shape is the contract in docs/lb.md, "The item"), so the
node's driver (appliance/lb/node.py) looks nothing up.

Pure over the store (through `appliance.agent.targets.View`): node references of pools
become the nodes' current addresses and a vhost's certificate its PEM, so a node's new
address or a renewed certificate changes the item's hash and the agent renders again.
"""

import logging

from appliance import config
from appliance.kinds import COMPUTE_NODES, SECRET_CERTIFICATES, target_uuid
from appliance.tenancy import addresses

from . import condition_pools, nginx, placement

log = logging.getLogger(__name__)

KIND, MASTER_KIND = "lb", "network_lb"
VHOSTS, ROUTES = "network_lb_vhosts", "network_lb_routes"
POOLS, CERTIFICATES = "network_lb_backend_pools", SECRET_CERTIFICATES
NODES = COMPUTE_NODES


class Unavailable(Exception):
    """Something the LB needs has no value yet; the message says what."""


def for_node(view, node):
    items = []
    for lb in _placed_on(view).get(node["uuid"], ()):
        item = {"uuid": target_uuid(node["uuid"], KIND, lb["uuid"]), "kind": KIND,
                "master": lb["uuid"], "master_kind": MASTER_KIND}
        items.append({**item, **_resolved(view, lb)})
    return items


def _placed_on(view):
    """{node uuid: [LB records placed there]}, worked out once per view (a view serves
    one payload, or one status pass over every node)."""
    cached = view.__dict__.get("_lb_placed")
    if cached is None:
        own = placement.appliance_node(view.store)
        cached = {}
        for lb in sorted(view.store.collection(MASTER_KIND).records(),
                         key=lambda r: r["uuid"]):
            for node in placement.placed(view.store, lb, own)[0]:
                cached.setdefault(node["uuid"], []).append(lb)
        view.__dict__["_lb_placed"] = cached
    return cached


def _resolved(view, lb):
    done = view.__dict__.setdefault("_lb_values", {})
    if lb["uuid"] not in done:
        try:
            done[lb["uuid"]] = {"value": value(view, lb)}
        except Unavailable as u:
            done[lb["uuid"]] = {"value": None, "unavailable": str(u)}
    return done[lb["uuid"]]


def value(view, lb):
    """V of the contract: enabled vhosts with their enabled routes, and every pool those
    routes name. Raises Unavailable."""
    store = view.store
    vhosts, named = [], []
    for vhost in sorted(store.collection(VHOSTS).by("lb", lb["uuid"]),
                        key=lambda v: (v["port"], v["protocol"], v["uuid"])):
        if not vhost.get("enabled", True):
            continue
        # creation order: nginx tries regex locations in the order they are written
        routes = sorted((r for r in store.collection(ROUTES).by("vhost", vhost["uuid"])
                         if r.get("enabled", True)),
                        key=lambda r: (r.get("created_at") or "", r["uuid"]))
        for route in routes:
            named += condition_pools.pools(route["condition"])
        vhosts.append({
            "uuid": vhost["uuid"], "protocol": vhost["protocol"], "port": vhost["port"],
            "domains": vhost.get("domains") or None, "tls": tls(view, vhost),
            "redirect_http": bool(vhost.get("redirect_http")),
            "proxy_protocol_from": vhost.get("proxy_protocol_from"),
            "routes": [{"uuid": r["uuid"], "condition": r["condition"]} for r in routes]})
    pools, refused = {}, []
    for uuid in sorted(set(named)):
        pool = store.collection(POOLS).get(uuid)
        if pool is not None:
            reach = addresses.PLATFORM if pool.get("platform_endpoints") else \
                reach_of(view, lb["project_id"])
            kept = []
            for endpoint in endpoints(view, pool["endpoints"]):
                why = reach.refusal(endpoint["host"])
                if why:
                    refused.append(f"pool {uuid}: endpoint {endpoint['host']}:"
                                   f"{endpoint['port']} left out: {why}")
                    continue
                kept.append(endpoint)
            pools[uuid] = {"balance": pool.get("balance") or "roundrobin",
                           "endpoints": kept}
    out = {"lb": lb["uuid"], "vhosts": vhosts, "pools": pools}
    if refused:
        # the address rule again at render: a network may have changed hands since the
        # pool was written (docs/security.md); the node serves the rest and reports these
        log.warning("load balancer %s: %s", lb["uuid"], "; ".join(refused))
        out["refused"] = refused
    if nginx.downloads(out):
        # the node's agent fetches the archives for the LB's project, by this rule
        out["reach"] = reach_of(view, lb["project_id"]).as_dict()
    return out


def reach_of(view, project_id):
    """The project's addresses.Reach, worked out once per view."""
    cached = view.__dict__.setdefault("_lb_reach", {})
    if project_id not in cached:
        settings = getattr(view, "settings", None) or config.DEFAULTS
        cached[project_id] = addresses.for_project(view.store, settings, project_id)
    return cached[project_id]


def tls(view, vhost):
    """{"crt", "key"} of an https vhost, from its raw cert or its certificate record."""
    cert = vhost.get("cert")
    if vhost["protocol"] != "https" or not cert:
        return None
    if cert["kind"] == "raw":
        key = view.box().open(VHOSTS, vhost["uuid"], "cert.key", cert["key"])
        return {"crt": cert["crt"], "key": key}
    uuid = cert["certificate"]
    record = view.record(CERTIFICATES, uuid)
    if record is None:
        raise Unavailable(f"certificate {uuid} not found")
    if not record.get("cert") or not record.get("key"):
        raise Unavailable(f"waiting for certificate {uuid}")
    opened = view.box().open_fields(CERTIFICATES, record, ("key",))
    return {"crt": record["cert"], "key": opened["key"]}


def endpoints(view, given):
    """Host endpoints, sorted: node and node set references become the nodes' current
    addresses (a node without one yet is left out); weight 0 takes no traffic, so it is
    left out too (nginx has no weight 0). A host:port named twice keeps its larger weight."""
    nodes = view.store.collection(NODES)
    found = {}

    def add(host, port, weight):
        if host and weight > 0:
            found[(host, port)] = max(weight, found.get((host, port), 0))

    for endpoint in given:
        kind, port, weight = endpoint["kind"], endpoint["port"], endpoint["weight"]
        if kind == "host":
            add(endpoint["host"], port, weight)
            continue
        members = [nodes.get(endpoint["node"])] if kind == "node" else \
            nodes.by("node_set", endpoint["node_set"])
        for node in members:
            if node is not None:
                add((node.get("default_network") or {}).get("ipv4"), port, weight)
    return [{"host": h, "port": p, "weight": w} for (h, p), w in sorted(found.items())]
