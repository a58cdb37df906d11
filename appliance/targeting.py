"""Where a record goes: the `target` field of configs, services and SSH keys, in one place.

A target is one of
    {"kind": "node", "node": <uuid>}             one node (VM or HW)
    {"kind": "node_set", "node_set": <uuid>}     every member of a node set
    {"kind": "nodes", "nodes": [<uuid>, ...]}    the nodes named (ours: HW nodes have no
                                                 set, and a monopoly service needs a group)

Three capabilities declare the field, the API checks it, the producers read it and the
delete rule follows it. Each of these once held its own copy (configs lower-cased the
uuids, services did not, SSH keys borrowed the configs' code), which tied configs, secret
and the agent into a cycle. Here it is written once, beneath all of them:

- `TARGET_SCHEMA`: the declared shape (validation and the OpenAPI document);
- `checked`: the one write-time rule: the uuids in their stored (lower-case) form, then
  who may target which node (`appliance/tenancy/nodes.py`, called, never copied). Every
  write of a record with a target checks its whole target, the one it keeps included: a
  PUT that does not touch the target still may not keep one the writer may not give;
- `names`, `nodes_named`, `delivers`: which nodes a target names, for the producers and
  the monopoly lease;
- `links`: a node or set that a target names is in use (appliance/api/links.py).

It imports only the floors below it: the API framework's links, the tenancy rules and
the kind names; the first two when a function needs them, so that the daemons that only
read targets (compute's VM seeds, DBaaS's status step) do not load the API framework
(tests/supervisor/test_imports.py).
"""

from appliance.kinds import COMPUTE_NODES, COMPUTE_SETS, UUID_PATTERN

_UUID = {"type": "string", "pattern": UUID_PATTERN}

TARGET_SCHEMA = {
    "type": "object",
    "oneOf": [
        {"properties": {"kind": {"const": "node"}, "node": _UUID},
         "required": ["kind", "node"], "additionalProperties": False},
        {"properties": {"kind": {"const": "node_set"}, "node_set": _UUID},
         "required": ["kind", "node_set"], "additionalProperties": False},
        {"properties": {"kind": {"const": "nodes"},
                        "nodes": {"type": "array", "items": _UUID, "minItems": 1,
                                  "maxItems": 256, "uniqueItems": True}},
         "required": ["kind", "nodes"], "additionalProperties": False},
    ],
}
DESCRIPTION = "{kind: node, node} | {kind: node_set, node_set} | {kind: nodes, nodes: [...]}"


# ---- writing a target ---------------------------------------------------------------

def normalized(target):
    """`target` with its uuids in the stored form (lower case: the producers compare them
    as strings), changed in place; None stays None."""
    if target:
        for key in ("node", "node_set"):
            if key in target:
                target[key] = target[key].lower()
        if "nodes" in target:
            target["nodes"] = [u.lower() for u in target["nodes"]]
    return target


def checked(store, principal, project_id, target, where="target"):
    """400 unless a record of `project_id` written by `principal` may name every node or
    node set of `target` (appliance/tenancy/nodes.py); the target, normalized in place."""
    from appliance.tenancy.nodes import check_target
    return check_target(store, principal, project_id, normalized(target), where)


# ---- which nodes a target names ------------------------------------------------------

def named(target, kind):
    """The uuids of the nodes (`kind` "node") or node sets ("node_set") `target` names
    directly."""
    target = target or {}
    if kind == "node_set":
        return [target["node_set"]] if target.get("kind") == "node_set" else []
    if target.get("kind") == "node":
        return [target["node"]]
    return list(target.get("nodes") or ()) if target.get("kind") == "nodes" else []


def sets_of(node):
    """Uuids of the node sets `node` is a member of."""
    node_set = node.get("node_set")
    if not node_set:
        return set()
    return {node_set.rsplit("/", 1)[-1]}


def names(target, node):
    """True when `target` (a stored target field value) names `node`."""
    kind = (target or {}).get("kind")
    if kind == "node":
        return target["node"] == node["uuid"]
    if kind == "node_set":
        return target["node_set"] in sets_of(node)
    if kind == "nodes":
        return node["uuid"] in target["nodes"]
    return False


def delivers(record, node):
    """True when `record` (a config, service or SSH key) goes to `node`: its target names
    the node, and the node is of its project (appliance/tenancy/nodes.py, `lands_on`)."""
    from appliance.tenancy.nodes import lands_on
    return names(record.get("target"), node) and lands_on(record, node)


def nodes_named(store, target):
    """The node records `target` names that exist (a missing one is left out)."""
    nodes = store.collection(COMPUTE_NODES)
    kind = (target or {}).get("kind")
    if kind == "node":
        found = nodes.get(target["node"])
        return [found] if found else []
    if kind == "nodes":
        return [n for n in (nodes.get(u) for u in target["nodes"]) if n]
    if kind == "node_set":
        return [n for n in nodes.records() if target["node_set"] in sets_of(n)]
    return []


def links(user_kind, field="target"):
    """The links of a `target` field to the nodes and sets it names (api/links.py): a
    node or set that a config, secret or service targets is in use."""
    from appliance.api.links import Link

    def values(kind):
        return lambda record: named(record.get(field), kind)
    return [Link(user_kind, COMPUTE_NODES, values=values("node"), label=f"{field} node"),
            Link(user_kind, COMPUTE_SETS, values=values("node_set"),
                 label=f"{field} node_set")]
