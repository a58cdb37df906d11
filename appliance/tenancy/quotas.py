"""Quotas per project: how much of the appliance one tenant may hold (docs/quotas.md).

Without them a project's owner could grow the state, every API process's memory and the
payload each node agent polls for without bound (100 configs of 256 KiB on one node made
a 26 MB payload, recomputed on every change). Each quota is declared once in QUOTAS:
its name, the setting that changes its limit (so `APPLIANCE_QUOTA_CORES`), its default,
and what it counts in which kind of record. IAM's projects install this module as a write
check of the Api (`Api.write_checks`): Resource.create_record and update_record call
`guard` and `check` before they write, so the API, the Element Manager's builder (which
creates an element's records through the same code) and every path family of a kind are
held to the same limits.

Rules:
- a quota counts the records of one project, whoever writes them (an admin writing into a
  project is held to that project's limits: raise the setting to allow more);
- the admin project is the platform's and has no limits (hidden node sets of LBs and DBaaS
  instances live there, charged to their owner's project instead);
- a write is refused only when it grows a quota past its limit: a PUT that does not grow
  anything passes, even in a project above a limit that was lowered;
- a negative limit means no limit; 0 allows none.

Concurrency: the check and the write happen under one cross-process lock per project
(striped over a few lock files), so two creates that each fit alone cannot both pass when
only one fits, whether they come from two API threads or from the API and the builder.
"""

import contextlib
import zlib

import orjson

from appliance.kinds import (ADMIN_PROJECT, COMPUTE_NODES, COMPUTE_SETS, COMPUTE_VOLUMES,
                             CONFIG_CONFIGS, DNS_DOMAINS, DNS_RECORDS, NETWORK_LB,
                             SQLDB_INSTANCES)

NODES, SETS, VOLUMES = COMPUTE_NODES, COMPUTE_SETS, COMPUTE_VOLUMES
LBS = NETWORK_LB
CONFIGS = CONFIG_CONFIGS
DOMAINS, RECORDS = DNS_DOMAINS, DNS_RECORDS
# quota-checked writes of one project hold one of these (named) store locks
LOCK_STRIPES = 16
MIB = 1024 * 1024


class Quota:
    """`counts`: {kind: amount(record) -> int}, what one record of that kind takes."""

    def __init__(self, name, default, unit, counts, why):
        self.name, self.default, self.unit, self.counts, self.why = (
            name, default, unit, counts, why)
        self.setting = f"quota_{name}"

    def limit(self, settings):
        value = (settings or {}).get(self.setting, self.default)
        return None if value is None or value < 0 else value

    def amount(self, kind, record):
        return self.counts[kind](record) if record is not None else 0

    def use(self, store, project_id):
        return sum(amount(r) for kind, amount in self.counts.items()
                   for r in store.collection(kind).by("project_id", project_id))


# ---- what a record takes ------------------------------------------------------------------

def _one(record):
    return 1


def _is_vm(record):
    return record.get("node_type", "VM") == "VM"


def _machines(record):
    """Nodes a record stands for: a node that is not a set member (members are their
    set's replicas, counted once there), a set's replicas."""
    if "replicas" in record:
        return record.get("replicas") or 0
    return 0 if record.get("node_set") else 1


# ---- what a capability declares ------------------------------------------------------------
# The rule (which quota counts what, and how) is this module's; the facts it needs about a
# capability's own fields are declared by that capability, from the module that defines
# them, so that tenancy/ imports no capability. Compute declares the sizes of a disk_spec
# (compute/disks.py); the LB and DBaaS declare the hidden node set a record stands for
# (lb/resources.py, sqldb/resources.py). Those modules are imported wherever records of
# their kinds are written or counted (the API imports every capability's resources).

_declared = {}


def declare_disk_sizes(sizes):
    """`sizes(disk_spec) -> [GB]`: the size of each disk of a node's or a set's disk_spec,
    its defaults applied."""
    _declared["disk_sizes"] = sizes


def declare_hidden_set(kind, shape):
    """`shape(record) -> (nodes, cores, ram MB, disk GB per node)` of the hidden node set
    (in the admin project) that a record of `kind` stands for, or None when it has none;
    its machines are charged to the record's project."""
    _declared["hidden_set", kind] = shape


def _declaration(key):
    try:
        return _declared[key]
    except KeyError:
        raise LookupError(f"quotas: nothing declared {key!r}: the capability that owns it "
                          "declares it when its module is imported") from None


def _machine_disk(record):
    return sum(_declaration("disk_sizes")(record.get("disk_spec")))


def _hidden(kind, index):
    def amount(record):
        found = _declaration(("hidden_set", kind))(record)
        if found is None:
            return 0
        return found[0] if index == 0 else found[0] * found[index]
    return amount


def _machine(field):
    def amount(record):
        if not _is_vm(record):
            return 0
        per_node = _machine_disk(record) if field == "disk" else (record.get(field) or 0)
        return _machines(record) * per_node
    return amount


def config_bytes(record):
    """What a config adds to every payload of its target: its body and its on_change,
    as stored (a template's links are counted as written, not as rendered)."""
    return len(orjson.dumps(record.get("body"))) + len(orjson.dumps(record.get("on_change")))


def _not_soa(record):
    return 0 if record.get("type") == "SOA" else 1


QUOTAS = [
    Quota("nodes", 200, "nodes", {
        NODES: _machines, SETS: _machines, LBS: _hidden(LBS, 0),
        SQLDB_INSTANCES: _hidden(SQLDB_INSTANCES, 0)},
        "nodes, set replicas and the hidden nodes of its LBs of type core and DBaaS "
        "instances: each is a machine the compute daemon places, watches and reconciles"),
    Quota("cores", 800, "cores", {
        NODES: _machine("cores"), SETS: _machine("cores"), LBS: _hidden(LBS, 1),
        SQLDB_INSTANCES: _hidden(SQLDB_INSTANCES, 1)},
        "virtual cores of the VMs above: the hypervisors' CPUs are shared by every project"),
    Quota("ram", 3276800, "MB", {
        NODES: _machine("ram"), SETS: _machine("ram"), LBS: _hidden(LBS, 2),
        SQLDB_INSTANCES: _hidden(SQLDB_INSTANCES, 2)},
        "RAM of the VMs above (3200 GiB: 200 nodes of 16 GiB)"),
    Quota("disk", 20000, "GB", {
        NODES: _machine("disk"), SETS: _machine("disk"), VOLUMES: lambda r: r.get("size") or 0,
        LBS: _hidden(LBS, 3), SQLDB_INSTANCES: _hidden(SQLDB_INSTANCES, 3)},
        "every disk of the VMs above (root disk and disks) and every volume: the "
        "hypervisors' storage pools are shared"),
    Quota("volumes", 500, "volumes", {VOLUMES: _one},
          "each volume is a disk the compute daemon creates and attaches"),
    Quota("lbs", 100, "load balancers", {LBS: _one},
          "each load balancer is an nginx configuration rendered for every node it runs on"),
    Quota("sqldb_instances", 100, "instances", {SQLDB_INSTANCES: _one},
          "each instance is a PostgreSQL cluster the DBaaS daemon watches and fails over"),
    Quota("configs", 1000, "configs", {CONFIGS: _one},
          "each config is an item of its nodes' payloads, rendered again on every change"),
    Quota("config_bytes", 16 * MIB, "bytes", {CONFIGS: config_bytes},
          "config bodies live in every API process's memory and in the state; 16 MiB is 64 "
          "configs at the 256 KiB maximum, or 1000 configs of 16 KiB"),
    Quota("dns_domains", 100, "domains", {DOMAINS: _one},
          "each domain is a zone the DNS server loads and serves"),
    Quota("dns_records", 10000, "records", {RECORDS: _not_soa},
          "records other than each domain's SOA: the DNS server holds them all in memory"),
]
# not a sum over records: the largest payload of configs that one node of the project gets
PER_NODE = Quota("config_bytes_per_node", 4 * MIB, "bytes", {},
                 "the bytes of configs delivered to one node (directly, in a node list, or "
                 "through its set): that payload is rendered and hashed again on every "
                 "change the node's agent waits for; 4 MiB is 16 configs at the 256 KiB "
                 "maximum")
ALL = QUOTAS + [PER_NODE]
BY_KIND = {}
for _quota in QUOTAS:
    for _kind in _quota.counts:
        BY_KIND.setdefault(_kind, []).append(_quota)


def setting_defaults():
    """{setting: default} of every quota (appliance/config.py declares them from here)."""
    return {quota.setting: quota.default for quota in ALL}


def counted(kind, project_id):
    """True when writes of `kind` into `project_id` are held to quotas."""
    return project_id is not None and project_id != ADMIN_PROJECT and (
        kind in BY_KIND)


# ---- the check ------------------------------------------------------------------------------

@contextlib.contextmanager
def guard(store, kind, project_id):
    """Held across a write's quota check and the write itself (a named store lock, so
    take it before any kind's lock, as Store.named_lock says). Nothing for a kind without
    quotas or for the admin project."""
    if not counted(kind, project_id):
        yield
        return
    stripe = zlib.crc32(project_id.encode()) % LOCK_STRIPES
    with store.named_lock(f"quota-{stripe}"):
        yield


def check(store, settings, kind, before, after):
    """Raise a 409 QuotaExceeded when writing `after` (a new record when `before` is
    None, else the record `before` becomes) would take a quota of its project past its
    limit. Call it under `guard`, just before the write."""
    project_id = (after or before or {}).get("project_id")
    if not counted(kind, project_id):
        return
    for quota in BY_KIND[kind]:
        limit = quota.limit(settings)
        if limit is None:
            continue
        more = quota.amount(kind, after) - quota.amount(kind, before)
        if more <= 0:
            continue
        use = quota.use(store, project_id)
        if use + more > limit:
            raise exceeded(quota, project_id, use, more, limit)
    if kind == CONFIGS:
        _check_per_node(store, settings, project_id, before, after)


def exceeded(quota, project_id, use, more, limit, where=""):
    """The 409 QuotaExceeded. The API's errors are imported here, not at the top:
    appliance/config.py reads this module's defaults, and the daemons that read settings
    never load the API (tests/supervisor/test_imports.py)."""
    from appliance.api.errors import Conflict  # noqa: PLC0415
    return Conflict(
        f"quota {quota.name} of project {project_id}{where}: use {use} + {more} requested "
        f"exceeds the limit {limit} ({quota.unit}); free some, or ask an administrator to "
        f"raise the setting {quota.setting}", type="QuotaExceeded")


# ---- configs per node -----------------------------------------------------------------------

def _payloads(store, project_id, exclude=None):
    """Config bytes per node of the project: ({node: bytes}, {set: bytes of the configs
    that target the set}, {node: its set}); `exclude`: a config uuid left out."""
    direct, by_set = {}, {}
    for config in store.collection(CONFIGS).by("project_id", project_id):
        if config["uuid"] == exclude:
            continue
        size = config_bytes(config)
        target = config.get("target") or {}
        if target.get("kind") == "node_set":
            by_set[target.get("node_set")] = by_set.get(target.get("node_set"), 0) + size
            continue
        for node in _target_nodes(target):
            direct[node] = direct.get(node, 0) + size
    set_of = {n["uuid"]: n.get("node_set")
              for n in store.collection(NODES).by("project_id", project_id)}
    return direct, by_set, set_of


def _target_nodes(target):
    if target.get("kind") == "node":
        return [target.get("node")]
    return list(dict.fromkeys(target.get("nodes") or ()))


def _receivers(store, target):
    """(node or None, set or None) pairs that a target reaches: a set reaches its present
    members and the members it will have (None, set)."""
    if target.get("kind") == "node_set":
        node_set = target.get("node_set")
        return [(m["uuid"], node_set) for m in store.collection(NODES).by(
            "node_set", node_set)] + [(None, node_set)]
    nodes = store.collection(NODES)
    return [(n, (nodes.get(n) or {}).get("node_set")) for n in _target_nodes(target)]


def _check_per_node(store, settings, project_id, before, after):
    limit = PER_NODE.limit(settings)
    if limit is None or after is None:
        return
    size = config_bytes(after)
    old_size = config_bytes(before) if before is not None else 0
    old = set(_receivers(store, before.get("target") or {})) if before is not None else set()
    direct, by_set, _ = _payloads(store, project_id, exclude=after.get("uuid"))
    for node, node_set in _receivers(store, after.get("target") or {}):
        if (node, node_set) in old and size <= old_size:
            continue        # this node's payload does not grow
        others = direct.get(node, 0) + by_set.get(node_set, 0)
        if others + size > limit:
            where = f" on node {node}" if node else f" on the nodes of set {node_set}"
            raise exceeded(PER_NODE, project_id, others, size, limit, where)


def largest_payload(store, project_id):
    direct, by_set, set_of = _payloads(store, project_id)
    totals = [direct.get(n, 0) + by_set.get(s, 0) for n, s in set_of.items()]
    return max(totals + list(by_set.values()) + [0])


# ---- reading use ------------------------------------------------------------------------------

def usage(store, settings, project_id):
    """{quota: {use, limit, unit, setting}} of a project; limit None: no limit (the
    admin project's, or a negative setting)."""
    platform = project_id == ADMIN_PROJECT
    out = {}
    for quota in QUOTAS:
        out[quota.name] = {"use": quota.use(store, project_id),
                           "limit": None if platform else quota.limit(settings),
                           "unit": quota.unit, "setting": quota.setting}
    out[PER_NODE.name] = {"use": largest_payload(store, project_id),
                          "limit": None if platform else PER_NODE.limit(settings),
                          "unit": PER_NODE.unit, "setting": PER_NODE.setting}
    return out


USAGE_SCHEMA = {
    "type": "object",
    "description": "each quota's current use and limit (null: no limit)",
    "additionalProperties": {
        "type": "object", "required": ["use", "limit", "unit", "setting"],
        "properties": {"use": {"type": "integer"},
                       "limit": {"type": ["integer", "null"]},
                       "unit": {"type": "string"},
                       "setting": {"type": "string"}}}}
