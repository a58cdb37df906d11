"""What travels between the platform and a node's agent: items and their hashes.

An item is one target resource for one node: {"uuid", "kind", "master", "master_kind",
"value"}. Its hash covers what the node must apply (kind and value), so a change of the
value and nothing else makes the agent act; the payload hash covers the set of items.
"""

import hashlib
import json
import uuid as uuidlib

# uuid5 namespace of target resources (fixed: the same node, kind and master give the same
# uuid on every server and after every restart)
NODE_NS = uuidlib.UUID("0b6f0c52-6a43-5c4e-9d0e-3f2a8f4c1d77")


def target_uuid(node_uuid, kind, master_uuid):
    return str(uuidlib.uuid5(NODE_NS, f"{node_uuid}/{kind}/{master_uuid}"))


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def item_hash(item):
    return hashlib.sha256(canonical({"kind": item["kind"], "value": item.get("value")})
                          .encode()).hexdigest()


def payload_hash(items):
    pairs = sorted((item["uuid"], item.get("hash") or item_hash(item)) for item in items)
    return hashlib.sha256(canonical(pairs).encode()).hexdigest()
