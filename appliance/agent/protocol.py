"""What travels between the platform and a node's agent: items and their hashes.

An item is one target resource for one node: {"uuid", "kind", "master", "master_kind",
"value"}. Its hash covers what the node must apply (kind and value), so a change of the
value and nothing else makes the agent act; the payload hash covers the set of items.
"""

import hashlib
import json

# an item's uuid: the producers below the agent name their items with it too
from appliance.kinds import NODE_NS, target_uuid  # noqa: F401


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def item_hash(item):
    return hashlib.sha256(canonical({"kind": item["kind"], "value": item.get("value")})
                          .encode()).hexdigest()


def payload_hash(items):
    pairs = sorted((item["uuid"], item.get("hash") or item_hash(item)) for item in items)
    return hashlib.sha256(canonical(pairs).encode()).hexdigest()
