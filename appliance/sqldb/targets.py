"""The platform side of DBaaS: what each member node gets (`for_node`, the producer of kind
`sqldb` in appliance/agent/capabilities.py). One item per (member node, instance), its
value the contract's (the prompt-level contract is restated in docs/sqldb-failover.md):
everything the node's driver needs, resolved, so that it looks nothing up.

Pure over the store through `appliance.agent.targets.View`; the sealed passwords are
opened with `view.box()`, the port read from `view.settings`, the client networks from
the instance (`client_networks`) or, when it leaves them unset, from the default (`hba`).

No item until the instance has a `primary` (its daemon picks the first one). After that a
member without an address gets an `unavailable` item, and while the primary itself has no
address (its node gone, say) every item is `unavailable`: the agent keeps what it runs
(an item gone would make the driver remove the instance's data), and failover picks a new
primary.
"""

import ipaddress

from appliance import config
from appliance.kinds import NETWORK_NETWORKS

from .members import (DATABASES, INSTANCES, KIND, MASTER_KIND, USERS, VERSIONS, host_of,
                      item_uuid, member, nodes_of)

REPLICATOR, ADMIN = "dbaas_replicator", "dbaas_admin"
NETWORKS = NETWORK_NETWORKS


class Unavailable(Exception):
    """Something the instance needs has no value yet; the message says what."""


def for_node(view, node):
    items = []
    for instance in _placed_on(view).get(node["uuid"], ()):
        item = {"uuid": item_uuid(node["uuid"], instance["uuid"]), "kind": KIND,
                "master": instance["uuid"], "master_kind": MASTER_KIND}
        if not host_of(node):
            items.append({**item, "value": None,
                          "unavailable": "waiting for the node's address"})
            continue
        shared = _shared(view, instance)
        if "unavailable" in shared:
            items.append({**item, **shared})
            continue
        value = shared["value"]
        self_ = member(node)
        role = "primary" if node["uuid"] == instance["primary"] else "replica"
        items.append({**item, "value": {**value, "self": self_, "role": role}})
    return items


def settings_of(view):
    return getattr(view, "settings", None) or config.DEFAULTS


def _placed_on(view):
    """{node uuid: [instances it gets an item of]}, once per view (a view serves one
    payload, or one status pass over every node)."""
    cached = view.__dict__.get("_sqldb_placed")
    if cached is None:
        cached = {}
        for instance in sorted(view.store.collection(INSTANCES).records(),
                               key=lambda r: r["uuid"]):
            if not instance.get("primary"):
                continue
            for node in nodes_of(view.store, instance):
                cached.setdefault(node["uuid"], []).append(instance)
        view.__dict__["_sqldb_placed"] = cached
    return cached


def _shared(view, instance):
    done = view.__dict__.setdefault("_sqldb_values", {})
    if instance["uuid"] not in done:
        try:
            done[instance["uuid"]] = {"value": value(view, instance)}
        except Unavailable as u:
            done[instance["uuid"]] = {"value": None, "unavailable": str(u)}
    return done[instance["uuid"]]


def value(view, instance):
    """The item's value less `self` and `role` (the same for every member). Raises
    Unavailable."""
    store, settings = view.store, settings_of(view)
    members = [member(n) for n in nodes_of(store, instance) if host_of(n)]
    primary = next((m for m in members if m["node"] == instance["primary"]), None)
    if primary is None:
        raise Unavailable(f"primary node {instance['primary']} has no address or is gone")
    version = store.collection(VERSIONS).get(instance.get("version") or "")
    if version is None:
        raise Unavailable(f"version {instance.get('version')} not found")
    users = sorted(store.collection(USERS).by("instance", instance["uuid"]),
                   key=lambda u: u["name"])
    names = {u["uuid"]: u["name"] for u in users}
    databases = {d["name"]: names[d["owner"]]
                 for d in store.collection(DATABASES).by("instance", instance["uuid"])
                 if d.get("owner") in names}
    box = view.box()
    return {
        "instance": instance["uuid"], "epoch": instance.get("epoch") or 0,
        "major": version["major"], "port": int(settings["sqldb_port"]),
        "primary": primary, "members": members,
        "sync_replica_number": instance.get("sync_replica_number") or 0,
        "hba": hba(store, instance, settings),
        "replication": {"user": REPLICATOR, "password": box.open(
            INSTANCES, instance["uuid"], "replication_password",
            instance["replication_password"])},
        "admin": {"user": ADMIN, "password": box.open(
            INSTANCES, instance["uuid"], "admin_password", instance["admin_password"])},
        "users": {u["name"]: u["password_hash"] for u in users},
        "databases": dict(sorted(databases.items())),
        "resources": {"cpu": instance.get("cpu"), "ram_mb": instance.get("ram")}}


def hba(store, instance, settings):
    """The client networks written into pg_hba.conf: the instance's `client_networks`
    when set (checked and normalized by the API), else `default_client_networks`."""
    given = instance.get("client_networks")
    if given is not None:
        return [str(n) for n in given]
    return default_client_networks(store, instance, settings)


def default_client_networks(store, instance, settings):
    """Where an instance's clients are unless its owner says otherwise (docs/sqldb.md,
    "Client networks"): the CIDRs of the project's networks, then each member node's own
    network (`member_network`), then the setting sqldb_client_networks (the way out
    before the field existed, kept as a source of the default); each once, in that order.
    A malformed CIDR in the setting is left out (pg_hba.conf would refuse the whole
    file)."""
    out = [n["cidr"] for n in sorted(store.collection(NETWORKS).by(
        "project_id", instance["project_id"]), key=lambda n: n["uuid"]) if n.get("cidr")]
    for node in nodes_of(store, instance):
        where = member_network(node)
        if where:
            out.append(where)
    for text in str(settings.get("sqldb_client_networks") or "").split(","):
        text = text.strip()
        if not text:
            continue
        try:
            out.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError:
            continue
    return list(dict.fromkeys(out))


def member_network(node):
    """The network a member node sits on, from its default_network (address and mask): a
    VM's is its project network's; a HW node's is the project network holding the
    address the operator gave it, or the LAN the appliance's own node found on its NIC
    (where the booted image's clients come from, QEMU's forwarded ports included); only
    the address (/32) when no mask is known or the mask is wider than /8. None without an
    address."""
    network = node.get("default_network") or {}
    host = network.get("ipv4")
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return None
    mask = network.get("mask")
    if mask not in (None, ""):
        try:
            net = ipaddress.ip_network(f"{address}/{mask}", strict=False)
            if net.prefixlen >= 8:
                return str(net)
        except ValueError:
            pass
    return str(ipaddress.ip_network(address))


def items_of(view, instance, nodes):
    """{node uuid: the member's item with its hash} for the nodes given."""
    from appliance.agent.protocol import item_hash
    out = {}
    for node in nodes:
        for item in for_node(view, node):
            if item["master"] == instance["uuid"]:
                out[node["uuid"]] = {**item, "hash": item_hash(item)}
    return out
