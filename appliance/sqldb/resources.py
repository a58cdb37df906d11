"""The DBaaS API (spec 2.9, 4.4, 8; reference-api.md section 9; docs/sqldb.md): versions,
instances, and the users and databases of an instance.

One set of records, several path families, so that the spec's paths, the spec's reference
forms and the reference CLI all work on the same resources:

- `/v1/sqldb/instances/...` (spec 4.4) and `/v1/types/sqldb/instances/...` (its reference
  forms), with versions at `/v1/types/sqldb/versions/` (whose list answers
  `{"versions": [...]}`, as 4.4 says);
- `/v1/types/postgres/...` and `/api/dbaas/v1/types/postgres/...` (the reference CLI's
  base, with and without the image's nginx, which drops the `/api/dbaas` prefix), where
  lists are plain arrays as the reference's are, and `/v1/types/` answers `["postgres"]`.

References (`version`, `owner`, `instance`) are accepted in every family's path form or as a
bare uuid, stored bare, and shown in the form of the family read: the spec's
`/v1/types/sqldb/...` forms, or `/v1/types/postgres/...` on the reference CLI's paths so
that it reads back what it wrote.

Every rule of 2.9 and 8 is checked before anything is written; a refused request changes
nothing. Statuses are the data plane's (the sqldb daemon's): a create is NEW, a change the
data plane must apply is IN_PROGRESS (instances) or NEW (users, databases).
"""

import ipaddress
import re
import secrets

from appliance.api.errors import BadRequest, Conflict, Forbidden
from appliance.api.fields import (UUID, UUID_RE, Boolean, Enum, Field, FieldType, FilterError,
                                  Integer, List, Object, String)
from appliance.api.links import Link
from appliance.api.resource import Action, Resource
from appliance.api.routing import PUBLIC
from appliance.kinds import ADMIN_PROJECT, COMPUTE_NODES
from appliance.kinds import UUID as _U
from appliance.tenancy import is_platform, quotas
from appliance.tenancy.nodes import check_nodes

from . import replication, scram
from .sets import ROOT_SIZE

VERSIONS, INSTANCES = "sqldb_versions", "sqldb_instances"
USERS, DATABASES = "sqldb_users", "sqldb_databases"
SERVICE = "sqldb"
# user and database writes check a rule across kinds (an owner is a user of the instance; a
# user owning a database stays): one writer at a time for all of them
LOCK = "sqldb"

SQLDB_TYPES = "/v1/types/sqldb"
POSTGRES_TYPES = "/v1/types/postgres"
DBAAS_PREFIX = "/api/dbaas"


class Family:
    """One path family: where its instances live, and the `/v1/types/<type>` base its
    references are shown with."""

    def __init__(self, instances, shown, versions=None, wrap_versions=False):
        self.instances = instances
        self.users = instances + "/<instance>/users"
        self.databases = instances + "/<instance>/databases"
        self.shown = shown
        self.versions = versions
        self.wrap_versions = wrap_versions

    def version_path(self, uuid):
        return f"{self.shown}/versions/{uuid}"

    def instance_path(self, uuid):
        return f"{self.shown}/instances/{uuid}"

    def user_path(self, instance, uuid):
        return f"{self.shown}/instances/{instance}/users/{uuid}"


FAMILIES = [
    Family("/v1/sqldb/instances", SQLDB_TYPES),
    Family(SQLDB_TYPES + "/instances", SQLDB_TYPES, versions=SQLDB_TYPES + "/versions",
           wrap_versions=True),
    Family(POSTGRES_TYPES + "/instances", POSTGRES_TYPES, versions=POSTGRES_TYPES + "/versions"),
    Family(DBAAS_PREFIX + POSTGRES_TYPES + "/instances", POSTGRES_TYPES,
           versions=DBAAS_PREFIX + POSTGRES_TYPES + "/versions"),
]
TYPES_PATHS = ("/v1/types", DBAAS_PREFIX + "/v1/types")
TYPE_NAMES = ["postgres"]

_TYPES = r"(?:/api/dbaas)?/v1/types/(?:sqldb|postgres)"
_INSTANCES = rf"(?:{_TYPES}|/v1/sqldb)/instances"
VERSION_REF = re.compile(rf"^(?:{_TYPES}/versions/)?({_U})/?$")
INSTANCE_REF = re.compile(rf"^(?:{_INSTANCES}/)?({_U})/?$")
USER_REF = re.compile(rf"^(?:{_INSTANCES}/({_U})/users/)?({_U})/?$")

STATUSES = ("NEW", "IN_PROGRESS", "ACTIVE", "ERROR")
CHILD_STATUSES = ("NEW", "ACTIVE", "ERROR")
# what the data plane uses: a change of any of them is IN_PROGRESS until applied
DATA_PLANE_FIELDS = ("cpu", "ram", "disk_size", "nodes_number", "sync_replica_number",
                     "client_networks")
# what sizes the hidden node set: required with placement node_set; with placement nodes
# the machines are given, so they may be left out (cpu and ram then only tune PostgreSQL)
MACHINE_FIELDS = ("cpu", "ram", "disk_size")
CLIENT_NETWORKS_MAX = 64
# a CIDR or a bare address as typed: digits, hex, dots and colons, an optional /prefix;
# nothing else (no whitespace, no zone, no netmask form) reaches ipaddress, which forgives
# a trailing newline in the prefix
CIDR_TEXT = re.compile(r"^[0-9A-Fa-f.:]{2,45}(/[0-9]{1,3})?\Z")
SEALED_FIELDS = ("replication_password", "admin_password")
NAME_MAX = 63
DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
RESERVED_USER_PREFIXES = ("pg_", "dbaas_")
RESERVED_USERS = ("postgres",)
# names PostgreSQL itself refuses for a role ("role name ... is reserved"): refused here,
# where the caller sees why, rather than as an ERROR from the node
POSTGRES_RESERVED_ROLES = ("public", "none")
# databases every cluster has, which the node never creates nor drops
RESERVED_DATABASES = ("postgres", "template0", "template1")
PASSWORD_MIN, PASSWORD_MAX = 8, 99
LIMITS = {"cpu": (1, 128), "ram": (512, 1024 * 1024), "disk_size": (8, 1024),
          "nodes_number": (1, 16), "sync_replica_number": (0, 15)}
PLACEMENT = {
    "type": "object", "required": ["kind"],
    "properties": {"kind": {"enum": ["node_set", "nodes"]},
                   "nodes": {"type": "array", "maxItems": LIMITS["nodes_number"][1],
                             "items": {"type": "string", "maxLength": 128}}},
    "additionalProperties": False,
    "description": "create only: {kind: node_set} (the default: a hidden node set of VMs "
                   "made for the instance) or {kind: nodes, nodes: [node uuid, ...]} "
                   "(exactly nodes_number existing nodes of the project, HW or VM)"}


def hidden_set(instance):
    """An instance on its own hidden set (placement node_set, the default): (nodes, cores,
    ram MB, disk GB per node) of that set (appliance/sqldb/sets.py set_record), charged to
    its project's quotas; None when it runs on the project's own nodes (counted as those
    nodes)."""
    if (instance.get("placement") or {}).get("kind", "node_set") != "node_set":
        return None
    return (instance.get("nodes_number") or 0, instance.get("cpu") or 0,
            instance.get("ram") or 0, ROOT_SIZE + (instance.get("disk_size") or 0))


quotas.declare_hidden_set(INSTANCES, hidden_set)


class Ref(FieldType):
    """A reference accepted as a bare uuid or any family's path to it, stored bare. The
    resource renders it in its family's form (it needs the record: an owner's path names
    its instance)."""
    type_name = "reference"

    def __init__(self, pattern, collection_path):
        # collection_path: what the OpenAPI document says reads show
        self.pattern, self.collection_path = pattern, collection_path
        self.shown = collection_path + "/<uuid>"

    def schema(self):
        return {"type": "string", "maxLength": 300,
                "description": f"a uuid or its path {self.shown}"}

    def to_input(self, value):
        if isinstance(value, str):
            m = self.pattern.match(value)
            if m:
                return m.group(m.lastindex).lower()
        return value

    def parse_filter(self, text):
        value = self.to_input(text)
        if not UUID_RE.match(value):
            raise FilterError(f"must be a UUID or {self.shown}")
        return value


class OwnerRef(Ref):
    """An owner's path names its instance, which the database checks: the path is kept
    until then (Databases.checked_owner), a bare uuid is lower-cased."""

    def to_input(self, value):
        if isinstance(value, str) and UUID_RE.match(value):
            return value.lower()
        return value

    def parse_filter(self, text):
        m = self.pattern.match(text)
        if m is None:
            raise FilterError(f"must be a UUID or {self.shown}")
        return m.group(2).lower()


NODE_REF = Ref(re.compile(rf"^(?:/v1/compute/nodes/)?({_U})/?$"), "/v1/compute/nodes")


def ref_uuid(where, value, shown):
    """The bare uuid of a reference already through Ref.to_input, or 400."""
    if not isinstance(value, str) or not UUID_RE.match(value):
        raise BadRequest(f"{where}: must be a UUID or a path {shown}")
    return value.lower()


def base_fields():
    return [Field("name", String(255, min_length=1), required=True),
            Field("description", String(255), default="", nullable=False)]


def check_range(record, name, optional=False):
    low, high = LIMITS[name]
    value = record.get(name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{name}: must be an integer from {low} to {high}, not {value!r}")


class SqldbResource(Resource):
    """What the DBaaS resources share: their family, and the one lock of child writes."""

    def __init__(self, family, **kwargs):
        self.family = family
        super().__init__(service=SERVICE, **kwargs)

    def locked(self, work):
        with self.api.store.named_lock(LOCK):
            return work()

    def create_record(self, call, body):
        return self.locked(lambda: super(SqldbResource, self).create_record(call, body))

    def update_record(self, call, uuid, body):
        return self.locked(lambda: super(SqldbResource, self).update_record(call, uuid, body))

    def delete_record(self, call, uuid):
        return self.locked(lambda: super(SqldbResource, self).delete_record(call, uuid))


# ---- versions ---------------------------------------------------------------------------

_MAJOR_IN_NAME = re.compile(r"^[A-Za-z_-]*(\d{2})(?:\.\d+)*\Z")


def major_of_name(name):
    """The major version a version's name says, for a body that gives none: the
    reference's versions are a name and an image (`{name: pg18, image: ...}`,
    dbaas.yaml.j2), the major being part of the name."""
    m = _MAJOR_IN_NAME.match(str(name or ""))
    if m is None or not 10 <= int(m.group(1)) <= 99:
        raise BadRequest(f"major: required, since the name {name!r} does not give it "
                         "(as pg18, 18 or 18.1 do)")
    return int(m.group(1))


class Versions(SqldbResource):
    """Admin-managed, in the admin project, shared with every project as its repositories
    are: read with `sqldb.version.read`, which every project role grants (the owner's
    `sqldb.*.*`, the reader's `sqldb.*.read`: whoever makes instances can pick a version;
    deny by default keeps a newcomer out), written only by the platform (an unscoped token
    or one of the admin project), so that a project owner's `sqldb.*.*` does not reach
    them."""

    def __init__(self, family):
        super().__init__(
            family, name="SqldbVersion", path=family.versions, kind=VERSIONS,
            policy="version", unique=[("name",)], project_scoped=True,
            shared_projects=(ADMIN_PROJECT,),
            description="a PostgreSQL version instances are made from; admin-managed",
            fields=base_fields() + [
                Field("project_id", UUID(), default=ADMIN_PROJECT, create_only=True,
                      description="always the admin project's: every project reads them"),
                Field("image", String(2048), default="", nullable=False,
                      description="the node image (URL or repo artifact) of the instances' "
                                  "nodes; may be empty: the node image's own PostgreSQL"),
                Field("major", Integer(10, 99), create_only=True,
                      description="the PostgreSQL major version: binaries in "
                                  "/usr/lib/postgresql/<major>/bin; read-only after create; "
                                  "left out, read from the name (pg18, 18, 18.1)"),
                Field("deprecated", Boolean(), default=False, nullable=False,
                      description="kept by the instances that use it, refused for new ones"),
            ])

    def admit(self, call):
        if call.request is not None and call.request.method != "GET" and \
                not is_platform(call.principal):
            raise Forbidden("versions are the administrator's: use an unscoped token or one "
                            "scoped to the admin project")

    def prepare_create(self, call, record):
        if record["project_id"] != ADMIN_PROJECT:
            raise BadRequest(f"project_id: versions belong to the admin project "
                             f"{ADMIN_PROJECT}")
        if record.get("major") is None:
            record["major"] = major_of_name(record.get("name"))
        return record

    def register(self, api):
        super().register(api)
        if self.family.wrap_versions:
            for route in api.routes:
                if route.method == "GET" and route.path == self.path:
                    route.response_schema = {
                        "type": "object", "required": ["versions"],
                        "properties": {"versions": route.response_schema}}

    def list_handler(self, call):
        listed = super().list_handler(call)
        return {"versions": listed} if self.family.wrap_versions else listed

    def declared_links(self):
        return [Link(INSTANCES, VERSIONS, field="version",
                     message=lambda version, users: f"version {version['name']!r} is used by "
                     f"{len(users)} instance(s), e.g. {users[0]['uuid']}: mark it "
                     "deprecated instead")]


# ---- instances --------------------------------------------------------------------------

class Instances(SqldbResource):
    def __init__(self, family):
        super().__init__(
            family, name="SqldbInstance", path=family.instances, kind=INSTANCES,
            policy="instance", project_scoped=True,
            description="a PostgreSQL instance: a primary and nodes_number - 1 streaming "
                        "replicas, sync_replica_number of them synchronous",
            fields=base_fields() + [
                Field("project_id", UUID(), required=True, create_only=True),
                Field("cpu", Integer(*LIMITS["cpu"]),
                      description="cores per node; required unless placement is kind "
                                  "nodes (then it only tunes PostgreSQL)"),
                Field("ram", Integer(*LIMITS["ram"]),
                      description="MB per node, 512 to 1048576 (1 TB); required unless "
                                  "placement is kind nodes (then it only tunes PostgreSQL)"),
                Field("disk_size", Integer(*LIMITS["disk_size"]),
                      description="GB per node, 8 to 1024 (1 TB); never shrinks; required "
                                  "unless placement is kind nodes (unused there)"),
                Field("nodes_number", Integer(*LIMITS["nodes_number"]), default=1,
                      nullable=False),
                Field("sync_replica_number", Integer(*LIMITS["sync_replica_number"]),
                      description="at most nodes_number - 1; default min(1, nodes_number "
                                  "- 1)"),
                Field("version", Ref(VERSION_REF, family.shown + "/versions"),
                      required=True,
                      description="read-only after create (the same value may be sent back)"),
                Field("placement", Object(PLACEMENT), create_only=True,
                      description=PLACEMENT["description"]),
                Field("client_networks", List(String(64), max_items=CLIENT_NETWORKS_MAX),
                      filterable=False,
                      description="the networks (CIDRs, or addresses for /32) whose "
                                  "clients may log in with a password; normalized. null: "
                                  "the default, the project's networks, the networks the "
                                  "member nodes sit on and the setting "
                                  "sqldb_client_networks "
                                  "(docs/sqldb.md). [] lets no client in. A change applies "
                                  "without a restart"),
                Field("effective_client_networks", List(String(64)), read_only=True,
                      filterable=False,
                      description="what pg_hba.conf allows now: client_networks, or the "
                                  "default when it is null"),
                Field("status", Enum(*STATUSES), read_only=True,
                      description="NEW, IN_PROGRESS after a change the data plane applies, "
                                  "ACTIVE, ERROR (with status_reason); the daemon's"),
                Field("status_reason", String(4096), read_only=True),
                Field("ipsv4", List(String(64)), read_only=True, filterable=False,
                      description="the member nodes' addresses"),
                Field("endpoint", String(300), read_only=True,
                      description="<instance uuid>.<zone>: a DNS name of the primary"),
                Field("primary", UUID(), read_only=True,
                      description="the primary's node uuid"),
                Field("epoch", Integer(), read_only=True,
                      description="starts at 0, one more per failover"),
                Field("node_status", Object(), read_only=True,
                      description="{node uuid: {role, status, reason, lsn}}"),
            ] + [Field(name, String(4096), hidden=True) for name in SEALED_FIELDS],
            actions=[Action("replication", self.replication, method="GET",
                            permission=f"{SERVICE}.instance.read",
                            response_schema=replication.RESPONSE_SCHEMA,
                            summary="How clients connect (host, port, a postgresql:// URI "
                                    "without password), which node is the primary, and "
                                    "each member's lag behind it")])

    def register(self, api):
        super().register(api)
        from appliance.secret.crypto import SecretBox  # noqa: PLC0415
        self.box = SecretBox(api.store)

    def replication(self, call, record):
        def names(kind):
            return sorted(r["name"] for r in call.store.collection(kind).records()
                          if r.get("instance") == record["uuid"])
        return replication.replication(call.store, self.api.settings, record,
                                       names(USERS), names(DATABASES))

    def render(self, record, only=None):
        out = super().render(record, only)
        if out.get("version"):
            out["version"] = self.family.version_path(record["version"])
        if "effective_client_networks" in out:
            from .targets import hba  # noqa: PLC0415 (targets imports the agent's modules)
            out["effective_client_networks"] = hba(self.api.store, record,
                                                   self.api.settings)
        return out

    def _normalize(self, body, current=None):
        # effective_client_networks is computed, never stored: sent back as read, it is
        # ignored like any read-only field sent back unchanged
        if current is not None and isinstance(body, dict) and \
                "effective_client_networks" in body:
            from .targets import hba  # noqa: PLC0415
            if body["effective_client_networks"] == hba(self.api.store, current,
                                                        self.api.settings):
                body = {k: v for k, v in body.items() if k != "effective_client_networks"}
        return super()._normalize(body, current)

    # ---- checks ----------------------------------------------------------------------

    def checked_version(self, call, value):
        uuid = ref_uuid("version", value, self.family.shown + "/versions/<uuid>")
        version = call.store.collection(VERSIONS).get(uuid)
        if version is None:
            raise BadRequest(f"version: no version {uuid}")
        if version.get("deprecated"):
            raise BadRequest(f"version: {version['name']!r} is deprecated: existing instances "
                             "keep it, new ones cannot use it")
        return uuid

    def check_sizes(self, record):
        on_nodes = (record.get("placement") or {}).get("kind") == "nodes"
        for name in LIMITS:
            check_range(record, name, optional=on_nodes and name in MACHINE_FIELDS)
        if record["sync_replica_number"] > record["nodes_number"] - 1:
            raise BadRequest(f"sync_replica_number: at most nodes_number - 1 = "
                             f"{record['nodes_number'] - 1}, not "
                             f"{record['sync_replica_number']}")

    def declared_links(self):
        return [Link(INSTANCES, COMPUTE_NODES, label="placement.nodes",
                     values=lambda r: (r.get("placement") or {}).get("nodes") or ())]

    def checked_placement(self, call, record):
        spec = record.get("placement") or {"kind": "node_set"}
        if spec["kind"] == "node_set":
            if "nodes" in spec:
                raise BadRequest("placement.nodes: only for kind nodes")
            return {"kind": "node_set"}
        given = spec.get("nodes")
        if not isinstance(given, list):
            raise BadRequest("placement.nodes: kind nodes needs a list of node uuids")
        nodes = [ref_uuid(f"placement.nodes.{i}", NODE_REF.to_input(n), NODE_REF.shown)
                 for i, n in enumerate(given)]
        if len(set(nodes)) != len(nodes):
            raise BadRequest("placement.nodes: a node is named twice")
        if len(nodes) != record["nodes_number"]:
            raise BadRequest(f"placement.nodes: {len(nodes)} node(s) for nodes_number "
                             f"{record['nodes_number']}: give exactly nodes_number")
        nodes = check_nodes(call.store, call.principal, record["project_id"], "node", nodes,
                            lambda i: f"placement.nodes.{i}")
        # every instance listens on the one port sqldb_port: a node runs one instance
        for other in call.store.collection(self.kind).records():
            taken = set((other.get("placement") or {}).get("nodes") or ()) & set(nodes)
            if taken and other["uuid"] != record.get("uuid"):
                raise Conflict(f"placement.nodes: node {sorted(taken)[0]} already runs "
                               f"instance {other['name']!r} ({other['uuid']}); a node runs "
                               f"one instance")
        return {"kind": "nodes", "nodes": nodes}

    def prepare_create(self, call, record):
        record["version"] = self.checked_version(call, record["version"])
        if record.get("sync_replica_number") is None:
            record["sync_replica_number"] = min(1, record["nodes_number"] - 1)
        kind = (record.get("placement") or {}).get("kind", "node_set")
        missing = [f for f in MACHINE_FIELDS if record.get(f) is None]
        if kind == "node_set" and missing:
            raise BadRequest(f"{missing[0]}: required: the instance gets nodes of its own "
                             f"of that size (give {', '.join(missing)}), unless it is "
                             "placed on given nodes (placement kind nodes)")
        self.check_sizes(record)
        record["placement"] = self.checked_placement(call, record)
        record["client_networks"] = checked_client_networks(record.get("client_networks"))
        for name in SEALED_FIELDS:
            record[name] = self.box.seal(self.kind, record["uuid"], name,
                                         secrets.token_urlsafe(24))
        record.update(status="NEW", status_reason=None, ipsv4=[], endpoint=None,
                      primary=None, epoch=0, node_status={})
        return record

    def prepare_update(self, call, current, changes):
        if "version" in changes:
            given = changes.pop("version")
            if given != current["version"]:
                raise BadRequest("version: an instance's version cannot change (from "
                                 f"{self.family.version_path(current['version'])})")
        on_nodes = (current.get("placement") or {}).get("kind") == "nodes"
        for name in ("name",) + DATA_PLANE_FIELDS:
            if name == "client_networks" or on_nodes and name in MACHINE_FIELDS:
                continue
            if name in changes and changes[name] is None:
                raise BadRequest(f"{name}: cannot be null")
        if "client_networks" in changes:
            changes["client_networks"] = checked_client_networks(changes["client_networks"])
        merged = {**current, **changes}
        self.check_sizes(merged)
        if None not in (merged["disk_size"], current["disk_size"]) and \
                merged["disk_size"] < current["disk_size"]:
            raise BadRequest(f"disk_size: cannot shrink (from {current['disk_size']} GB to "
                             f"{merged['disk_size']} GB)")
        if (current.get("placement") or {}).get("kind") == "nodes" and \
                merged["nodes_number"] != current["nodes_number"]:
            raise BadRequest("nodes_number: cannot change on an instance placed on given "
                             "nodes (placement kind nodes)")
        if any(merged.get(f) != current.get(f) for f in DATA_PLANE_FIELDS):
            changes.update(status="IN_PROGRESS", status_reason=None)
        return changes

    def after_delete(self, call, record):
        # its users and databases go in the same request; the daemon sweeps the rest
        for kind in (DATABASES, USERS):
            call.store.collection(kind).delete_where(
                lambda r: r.get("instance") == record["uuid"])


def checked_client_networks(value):
    """`client_networks` normalized (each a network in its shortest form, host bits
    cleared, a bare address as /32 or /128, duplicates dropped), or 400 naming the first
    entry that is not a CIDR. None stays None: the default. No tenant rule applies: the
    list only widens who may *try* to log in to the owner's own database (a password is
    still needed, the platform's roles stay closed), it reaches nothing (docs/sqldb.md)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadRequest("client_networks: must be a list of CIDRs like 192.0.2.0/24, or "
                         "null for the default")
    out = []
    for i, item in enumerate(value):
        net = None
        if isinstance(item, str) and CIDR_TEXT.match(item):
            try:
                net = ipaddress.ip_network(item, strict=False)
            except ValueError:
                net = None
        if net is None:
            raise BadRequest(f"client_networks.{i}: {item!r} is not a network like "
                             "192.0.2.0/24 or 2001:db8::/32 (or an address)")
        if str(net) not in out:
            out.append(str(net))
    return out


# ---- users and databases ----------------------------------------------------------------

class InstanceChild(SqldbResource):
    """A user or a database: under its instance, in its instance's project."""

    def render(self, record, only=None):
        out = super().render(record, only)
        if out.get("instance"):
            out["instance"] = self.family.instance_path(record["instance"])
        return out

    def item_path(self, record):
        return self.path.replace("<instance>", record["instance"]) + "/" + record["uuid"]

    def own_project(self, record, instance):
        if record.get("project_id") not in (None, instance["project_id"]):
            raise BadRequest("project_id: must be the instance's")
        record["project_id"] = instance["project_id"]

    def instance_of(self, call, record):
        return call.store.collection(INSTANCES).require(record["instance"])


def check_name(where, name, pattern, rule):
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}: required")
    if len(name) > NAME_MAX:
        raise BadRequest(f"{where}: at most {NAME_MAX} characters, not {len(name)}")
    if not pattern.fullmatch(name):
        raise BadRequest(f"{where}: {rule}")


def check_user_name(name):
    check_name("name", name, USER_NAME, "must start with a letter or an underscore and hold "
               "only letters, digits, underscores and dollar signs")
    lowered = name.lower()
    if lowered.startswith(RESERVED_USER_PREFIXES) or lowered in RESERVED_USERS:
        raise BadRequest(f"name: {name!r} is reserved (names starting with pg_ or dbaas_, "
                         "and postgres, are the platform's)")
    if lowered in POSTGRES_RESERVED_ROLES:
        raise BadRequest(f"name: {name!r} is reserved by PostgreSQL")


def check_password(password):
    if not isinstance(password, str) or not \
            PASSWORD_MIN <= len(password) <= PASSWORD_MAX:
        raise BadRequest(f"password: must be {PASSWORD_MIN} to {PASSWORD_MAX} characters")
    if "\x00" in password:
        # no client can send it: libpq's strings end there
        raise BadRequest("password: cannot hold a NUL character")


def instance_field(family):
    return Field("instance", Ref(INSTANCE_REF, family.shown + "/instances"),
                 create_only=True, description="taken from the path")


class Users(InstanceChild):
    def __init__(self, family):
        super().__init__(
            family, name="SqldbUser", path=family.users, kind=USERS,
            policy="user", project_scoped=True, parent=("instance", family.instances),
            unique=[("instance", "name")],
            description="a PostgreSQL role of an instance that logs in with a password "
                        "(SCRAM-SHA-256)",
            fields=[
                Field("name", String(NAME_MAX + 1), required=True, create_only=True,
                      description="a role name: a letter or _, then letters, digits, _ and "
                                  "$, at most 63; not pg_*, dbaas_*, postgres; read-only "
                                  "after create"),
                Field("description", String(255), default="", nullable=False),
                instance_field(family),
                Field("project_id", UUID(), create_only=True, description="the instance's"),
                Field("password", String(PASSWORD_MAX + 1), write_only=True, omit_unset=True,
                      description="8 to 99 characters; write-only: kept only as its "
                                  "SCRAM-SHA-256 verifier, never shown"),
                Field("password_hash", String(512), hidden=True),
                Field("status", Enum(*CHILD_STATUSES), read_only=True,
                      description="NEW after a create or a new password, ACTIVE once the "
                                  "primary has it, ERROR"),
                Field("status_reason", String(4096), read_only=True),
            ])

    def prepare_create(self, call, record):
        self.own_project(record, self.instance_of(call, record))
        check_user_name(record["name"])
        password = record.pop("password", None)
        if password is None:
            raise BadRequest("password: required")
        check_password(password)
        record.update(password_hash=scram.verifier(password), status="NEW",
                      status_reason=None)
        return record

    def prepare_update(self, call, current, changes):
        if "password" in changes:
            password = changes.pop("password")
            check_password(password)
            if not scram.verifies(password, current.get("password_hash")):
                changes.update(password_hash=scram.verifier(password), status="NEW",
                               status_reason=None)
        return changes

    def declared_links(self):
        return [Link(DATABASES, USERS, field="owner",
                     message=lambda user, owned: f"user {user['name']!r} owns database(s) "
                     f"{', '.join(repr(d['name']) for d in owned)} ({owned[0]['uuid']}): "
                     "delete them or give them another owner first")]


class Databases(InstanceChild):
    def __init__(self, family):
        super().__init__(
            family, name="SqldbDatabase", path=family.databases, kind=DATABASES,
            policy="database", project_scoped=True, parent=("instance", family.instances),
            unique=[("instance", "name")],
            description="a PostgreSQL database of an instance, owned by one of its users",
            fields=[
                Field("name", String(NAME_MAX + 1), required=True, create_only=True,
                      description="an SQL identifier: a letter or _, then letters, digits "
                                  "and _, at most 63; read-only after create"),
                Field("description", String(255), default="", nullable=False),
                instance_field(family),
                Field("project_id", UUID(), create_only=True, description="the instance's"),
                Field("owner", OwnerRef(USER_REF, family.shown + "/instances/<i>/users"),
                      required=True, description="a user of the same instance"),
                Field("status", Enum(*CHILD_STATUSES), read_only=True,
                      description="NEW after a create or an owner change, ACTIVE once the "
                                  "primary has it, ERROR"),
                Field("status_reason", String(4096), read_only=True),
            ])

    def render(self, record, only=None):
        out = super().render(record, only)
        if out.get("owner"):
            out["owner"] = self.family.user_path(record["instance"], record["owner"])
        return out

    def checked_owner(self, call, instance_uuid, given):
        """The owner's bare uuid: a user of this instance, given as a uuid or a path (whose
        instance must be this one), else 400."""
        m = USER_REF.match(given) if isinstance(given, str) else None
        if m is None:
            raise BadRequest(f"owner: must be a UUID or a path "
                             f"{self.family.shown}/instances/<i>/users/<uuid>")
        if m.group(1) and m.group(1).lower() != instance_uuid:
            raise BadRequest(f"owner: {given} is a user of another instance")
        uuid = m.group(2).lower()
        user = call.store.collection(USERS).get(uuid)
        if user is None or user.get("instance") != instance_uuid:
            raise BadRequest(f"owner: no user {uuid} in instance {instance_uuid}")
        return uuid

    def prepare_create(self, call, record):
        self.own_project(record, self.instance_of(call, record))
        check_name("name", record["name"], DATABASE_NAME, "an SQL identifier: it starts "
                   "with a letter or an underscore and holds only letters, digits and "
                   "underscores")
        if record["name"].lower() in RESERVED_DATABASES:
            raise BadRequest(f"name: {record['name']!r} is a database every PostgreSQL "
                             "cluster has already")
        record["owner"] = self.checked_owner(call, record["instance"], record["owner"])
        record.update(status="NEW", status_reason=None)
        return record

    def prepare_update(self, call, current, changes):
        if "owner" in changes:
            changes["owner"] = self.checked_owner(call, current["instance"], changes["owner"])
            if changes["owner"] != current["owner"]:
                changes.update(status="NEW", status_reason=None)
        return changes


# ---- registration -----------------------------------------------------------------------

def all_resources():
    out = []
    for family in FAMILIES:
        if family.versions:
            out.append(Versions(family))
        out += [Instances(family), Users(family), Databases(family)]
    return out


def types_handler(call):
    return list(TYPE_NAMES)


def register(api):
    """The capability's entry (appliance/app.py)."""
    for resource in all_resources():
        resource.register(api)
    for path in TYPES_PATHS:
        # a constant, as `/` is: public (the reference CLI's element answers it alike)
        api.route("GET", path, types_handler, permission=PUBLIC, tag=SERVICE,
                  summary="the database types: [\"postgres\"]",
                  response_schema={"type": "array", "items": {"type": "string"}})

