"""Where a resource goes: the target field shared by configs, services and SSH keys, and
the view over the store that producers read through.

A target is one of
    {"kind": "node", "node": <uuid>}             one node (VM or HW)
    {"kind": "node_set", "node_set": <uuid>}     every member of a node set
    {"kind": "nodes", "nodes": [<uuid>, ...]}    the nodes named (ours: HW nodes have no
                                                 set, and a monopoly service needs a group)
"""

from appliance.em.links import Unavailable

UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
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


def target_links(user_kind, field="target"):
    """The links of a `target` field to the nodes and sets it names (api/links.py): a
    node or set that a config, secret or service targets is in use."""
    from appliance.api.links import Link

    def named(kind):
        def values(record):
            target = record.get(field) or {}
            if kind == "node_set":
                return [target["node_set"]] if target.get("kind") == "node_set" else []
            if target.get("kind") == "node":
                return [target["node"]]
            return list(target.get("nodes") or ()) if target.get("kind") == "nodes" else []
        return values
    return [Link(user_kind, "compute_nodes", values=named("node"), label=f"{field} node"),
            Link(user_kind, "compute_sets", values=named("node_set"),
                 label=f"{field} node_set")]


class View:
    """Read access to the store for producers (pure functions of what it returns)."""

    def __init__(self, store, secret_box=None, settings=None):
        self.store = store
        self._box = secret_box
        # the process's settings, for a producer whose value depends on one (sqldb's port)
        self.settings = settings

    def record(self, kind, uuid):
        return self.store.collection(kind).get(uuid)

    def sets_of(self, node):
        """Uuids of the node sets `node` is a member of."""
        node_set = node.get("node_set")
        if not node_set:
            return set()
        return {node_set.rsplit("/", 1)[-1]}

    def targets(self, target, node):
        """True when `target` (a target field value) names `node`."""
        kind = (target or {}).get("kind")
        if kind == "node":
            return target["node"] == node["uuid"]
        if kind == "node_set":
            return target["node_set"] in self.sets_of(node)
        if kind == "nodes":
            return node["uuid"] in target["nodes"]
        return False

    def delivers(self, record, node):
        """True when `record` (a config, service or SSH key) goes to `node`: its target
        names the node, and the node is of its project (appliance/tenancy/nodes.py)."""
        from appliance.tenancy.nodes import lands_on
        return self.targets(record.get("target"), node) and lands_on(record, node)

    def nodes_of(self, target):
        """The node records `target` names that exist (a missing one is left out)."""
        nodes = self.store.collection("compute_nodes")
        kind = (target or {}).get("kind")
        if kind == "node":
            found = nodes.get(target["node"])
            return [found] if found else []
        if kind == "nodes":
            return [n for n in (nodes.get(u) for u in target["nodes"]) if n]
        if kind == "node_set":
            return [n for n in nodes.records() if target["node_set"] in self.sets_of(n)]
        return []

    def box(self):
        """The store's SecretBox, made on first use (opening sealed fields)."""
        if self._box is None:
            from appliance.secret.crypto import SecretBox
            self._box = SecretBox(self.store)
        return self._box

    def secret_value(self, kind, uuid):
        """The effective (opened) value of a secret record; Unavailable when it has none."""
        from appliance.secret.resources import KINDS, effective_value
        record = self.record(kind, uuid)
        if record is None:
            raise Unavailable(f"{kind}/{uuid}", "resource")
        value = effective_value(kind, self.box().open_fields(kind, record,
                                                             KINDS[kind].sealed))
        if value is None:
            raise Unavailable(f"{kind}/{uuid}", "value")
        return value


def items_for(view, node, producers=None):
    """Every target item of `node`, each with its "hash", in a stable order; the payload's
    hash. A producer that fails raises: a partial payload would make the agent remove
    what the missing producer would have given."""
    from . import capabilities, protocol
    items = []
    for kind, produce in sorted((producers or capabilities.producers()).items()):
        for item in produce(view, node):
            items.append({**item, "hash": protocol.item_hash(item)})
    items.sort(key=lambda i: i["uuid"])
    return items, protocol.payload_hash(items)
