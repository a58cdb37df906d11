"""The status of master resources (configs, services, SSH keys, LBs) from what their
nodes' agents report: the generic step the status daemon (daemons/status.py) runs for
every kind of capabilities.MASTERS (docs/agent.md, "Status").

A master's targets are the items its kind's producer gives for every node; each is judged
against the agent's actual resource of the same uuid. All ACTIVE with the target's hash:
ACTIVE. Any ERROR: ERROR. Else IN_PROGRESS, naming the first node still waiting and why.
The per-node judgement goes into the master's read-only `node_status`.
"""

from appliance.kinds import COMPUTE_SETS

from . import capabilities, protocol
from .credentials import AGENTS, NODES, RESOURCES
from .targets import View

SETS = COMPUTE_SETS
# kinds whose writes can move a master's status (besides the master kinds): the reports,
# the agents and nodes, and what producers read (the descriptors' Target.reads)
WATCHED = (RESOURCES, AGENTS, NODES, SETS, *capabilities.READS)
# master kinds placed by their capability rather than by a `target` field (the descriptors'
# Target.unplaced)
PLACEMENT = capabilities.PLACEMENT


def watched_kinds():
    return tuple(dict.fromkeys(WATCHED + tuple(capabilities.MASTERS.values())))


def aggregate(store, master_kind, view=None):
    """Write status, status_reason and node_status of every record of `master_kind` that
    changed; returns how many were written. A kind whose producer is not installed is
    left alone."""
    kind = next((k for k, m in capabilities.MASTERS.items() if m == master_kind), None)
    produce = capabilities.producers().get(kind)
    if produce is None:
        return 0
    view = view or View(store)
    targets = {}
    for node in store.collection(NODES).records():
        for item in produce(view, node):
            item = {**item, "hash": protocol.item_hash(item)}
            targets.setdefault(item["master"], []).append((node, item))
    agents = {a.get("node") for a in store.collection(AGENTS).records()}
    actual = store.collection(RESOURCES)
    masters = store.collection(master_kind)
    updates = {}
    unplaced = capabilities.load(PLACEMENT[master_kind]) if master_kind in PLACEMENT \
        else None
    for record in masters.records():
        if unplaced is None and not record.get("target"):
            # on no node, so not the agents': an SSH key without a target is delivered to
            # the data plane, and its status is the delivery daemon's (docs/secrets.md).
            # Judged here it would be ACTIVE before its file is written, and a failed
            # delivery's ERROR would be undone on every pass. Only what the agents once
            # judged (a target since removed) is cleared.
            if record.get("node_status"):
                updates[record["uuid"]] = (record["revision"], {"node_status": {}})
            continue
        missing = missing_target(store, record.get("target"))
        waiting = unplaced(store, record) if unplaced else None
        if missing:
            judged = ("ERROR", f"target {missing} not found", {})
        elif waiting:
            judged = (*waiting, {})
        else:
            judged = judge(targets.get(record["uuid"], ()), agents, actual)
        if judged != (record.get("status"), record.get("status_reason"),
                      record.get("node_status")):
            updates[record["uuid"]] = (record["revision"], dict(zip(
                ("status", "status_reason", "node_status"), judged)))
    # compare-and-set: a record that changed meanwhile is skipped, and its change brings
    # the daemon back here
    return len(masters.update_many(updates)) if updates else 0


def missing_target(store, target):
    """"node <uuid>" or "node set <uuid>" for a target that names what does not exist."""
    kind = (target or {}).get("kind")
    nodes = store.collection(NODES)
    if kind == "node" and nodes.get(target["node"]) is None:
        return f"node {target['node']}"
    if kind == "nodes":
        gone = [u for u in target["nodes"] if nodes.get(u) is None]
        if gone:
            return f"node {gone[0]}"
    if kind == "node_set" and store.collection(SETS).get(target["node_set"]) is None:
        return f"node set {target['node_set']}"
    return None


def judge(targets, agents, actual):
    """(status, reason, node_status) of one master from its (node, item) pairs."""
    node_status, first_error, first_wait = {}, None, None
    for node, item in sorted(targets, key=lambda pair: pair[0].get("name") or ""):
        row = actual.get(item["uuid"])
        value = {}
        if item.get("unavailable"):
            # `refused`: the platform will not deliver it as it stands (configs/paths.py)
            status = "ERROR" if item.get("refused") else "IN_PROGRESS"
            reason = item["unavailable"]
        elif node["uuid"] not in agents:
            status, reason = "IN_PROGRESS", "no agent is enrolled on the node"
        elif row is None or row.get("hash") != item["hash"]:
            status, reason = "IN_PROGRESS", "waiting for the node's agent to apply it"
        else:
            status, reason, value = row["status"], row.get("reason"), row.get("value") or {}
            value = {k: v for k, v in value.items() if k != "readings"}     # metrics only
        node_status[node["uuid"]] = {**value, "status": status, "reason": reason}
        said = f"node {node.get('name') or node['uuid']}: {reason}"
        if status == "ERROR" and first_error is None:
            first_error = said
        elif status != "ACTIVE" and first_wait is None:
            first_wait = said
    if first_error:
        return "ERROR", first_error, node_status
    if first_wait:
        return "IN_PROGRESS", first_wait, node_status
    return "ACTIVE", None, node_status
