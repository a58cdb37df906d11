"""The view over the store that producers read through, and a node's payload.

What a `target` field is and which nodes it names is appliance/targeting.py's; the view
answers it for the producers, beside the records and the opened secrets they read.
"""

from appliance import targeting
from appliance.em.links import Unavailable


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
        return targeting.sets_of(node)

    def targets(self, target, node):
        """True when `target` (a target field value) names `node`."""
        return targeting.names(target, node)

    def delivers(self, record, node):
        """True when `record` (a config, service or SSH key) goes to `node`
        (appliance/targeting.py)."""
        return targeting.delivers(record, node)

    def nodes_of(self, target):
        """The node records `target` names that exist (a missing one is left out)."""
        return targeting.nodes_named(self.store, target)

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
