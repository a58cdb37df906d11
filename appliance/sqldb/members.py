"""Who an instance's members are and where they listen: the one reading of `placement`
that the producer, failover, status and endpoint share (docs/sqldb-failover.md).

placement `nodes` names its nodes; placement `node_set` (the default) is the hidden set
whose uuid is the instance's (appliance/sqldb/sets.py). A member's host is its node's
`default_network.ipv4`, a HW node's too.
"""

from appliance.kinds import COMPUTE_NODES, COMPUTE_SETS, UA_RESOURCES, target_uuid

KIND, MASTER_KIND = "sqldb", "sqldb_instances"
INSTANCES, VERSIONS = "sqldb_instances", "sqldb_versions"
USERS, DATABASES = "sqldb_users", "sqldb_databases"
NODES, SETS, RESOURCES = COMPUTE_NODES, COMPUTE_SETS, UA_RESOURCES


def nodes_of(store, instance):
    """The instance's member node records that exist, by node uuid."""
    placement = instance.get("placement") or {"kind": "node_set"}
    nodes = store.collection(NODES)
    if placement.get("kind") == "nodes":
        found = [nodes.get(uuid) for uuid in placement.get("nodes") or ()]
        found = [n for n in found if n is not None]
    else:
        found = nodes.by("node_set", instance["uuid"])
    return sorted(found, key=lambda n: n["uuid"])


def host_of(node):
    return (node.get("default_network") or {}).get("ipv4") or None


def pg_name(node_uuid):
    """The member's name in PostgreSQL (application_name, synchronous_standby_names)."""
    return "n" + node_uuid.replace("-", "")


def member(node):
    return {"node": node["uuid"], "host": host_of(node), "name": pg_name(node["uuid"])}


def item_uuid(node_uuid, instance_uuid):
    return target_uuid(node_uuid, KIND, instance_uuid)


def rows_of(store, instance, nodes):
    """{node uuid: the ua_resources row of its item, or None}."""
    coll = store.collection(RESOURCES)
    return {n["uuid"]: coll.get(item_uuid(n["uuid"], instance["uuid"])) for n in nodes}
