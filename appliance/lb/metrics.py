"""The LB family of the infrastructure metrics (docs/metrics-infra.md): what each node's
LB nginx counts, as its agent reports it.

Why through the agent: the node agent is the one way the platform acts on a node; the
platform never opens a connection to a node's nginx. The agent's lb driver
(appliance/lb/node.py) reads stub_status from a unix socket of the node's LB instance (no
address: not reachable off the node, and no LB's listen can take it) every
`agent_lb_stats_seconds`, and reports it in each LB item's value under `readings.nginx`.
The compute daemon, which already runs the LBs' platform step every pass, turns the latest
rows into gauges here.

Why per node: one nginx instance on a node serves every LB placed there, and stub_status
counts for the whole instance, so the numbers are labelled by node; `appliance_lb_info`
says which LBs a node serves, to join on `node` in PromQL. A reading older than
STALE_SECONDS (the agent stopped reporting) is left out rather than shown frozen.
"""

import datetime

from appliance.infra_metrics import ResourceGauges, guarded, resource_gauge
from appliance.kinds import COMPUTE_NODES, UA_RESOURCES
from state.collection import parse_time

LBS = "network_lb"
STALE_SECONDS = 300.0

# published by the one compute daemon
_NODE = ["node", "node_name"]
CONNECTIONS = resource_gauge(
    "appliance_lb_nginx_connections", "Client connections of the node's LB nginx by state: "
    "active (all), reading, writing, waiting (idle keep-alive).", _NODE + ["state"])
ACCEPTED = resource_gauge(
    "appliance_lb_nginx_connections_accepted_total", "Client connections the node's LB "
    "nginx accepted, cumulative (use rate()).", _NODE)
HANDLED = resource_gauge(
    "appliance_lb_nginx_connections_handled_total", "Client connections the node's LB "
    "nginx handled, cumulative; below accepted when it hit a limit.", _NODE)
REQUESTS = resource_gauge(
    "appliance_lb_nginx_requests_total", "Client requests of the node's LB nginx, "
    "cumulative (use rate()).", _NODE)
INFO = resource_gauge(
    "appliance_lb_info", "1 for each LB a node's nginx serves (join on node).",
    ["lb", "name", "project", "node"])

GAUGES = ResourceGauges(CONNECTIONS, ACCEPTED, HANDLED, REQUESTS, INFO)


def values(store, now=None):
    """{gauge: {labels: value}} from the LB rows of ua_resources."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    lbs = {lb["uuid"]: lb for lb in store.collection(LBS).records()}
    nodes = store.collection(COMPUTE_NODES)
    out = GAUGES.empty()
    latest = {}             # node uuid -> the freshest reading among its LBs' rows
    for row in store.collection(UA_RESOURCES).by("kind", "lb"):
        lb, node_uuid = lbs.get(row.get("res_uuid")), row.get("node")
        if lb is None or not node_uuid:
            continue
        out[INFO][(lb["uuid"], lb.get("name") or "", lb.get("project_id") or "",
                   node_uuid)] = 1
        reading = (((row.get("value") or {}).get("readings") or {}).get("nginx"))
        if not reading or not reading.get("read_at"):
            continue
        if node_uuid not in latest or reading["read_at"] > latest[node_uuid]["read_at"]:
            latest[node_uuid] = reading
    for node_uuid, reading in latest.items():
        read_at = parse_time(reading["read_at"])
        if (now - read_at).total_seconds() > STALE_SECONDS:
            continue
        node = nodes.get(node_uuid) or {}
        key = (node_uuid, node.get("name") or "")
        for state in ("active", "reading", "writing", "waiting"):
            out[CONNECTIONS][key + (state,)] = int(reading[state])
        out[ACCEPTED][key] = int(reading["accepted"])
        out[HANDLED][key] = int(reading["handled"])
        out[REQUESTS][key] = int(reading["requests"])
    return out


def publish(store, now=None):
    """Never raises: a failure counts in appliance_infra_collection_errors_total."""
    guarded("lb", lambda: GAUGES.publish(values(store, now)))
