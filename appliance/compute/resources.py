"""The compute API: hypervisors, placement policies, nodes, node sets and volumes.

Shapes follow the reference (docs/compute.md); the API writes what a client asks for and
the compute daemon (crec's `reconcile.py`) moves statuses on. Set members are ordinary
nodes that `sets.reconcile_sets` creates and deletes.

This module is the declaration and the HTTP mapping only. The rules its hooks call live
beneath it, so that a reader finds each once and the daemon follows the same one:
lifecycle.py, drivers.py and console.py (shared with the compute pass, free of the API
framework), machine_rules.py, hypervisor_rules.py and volume_rules.py (the API's checks).
"""

import base64
import re
import secrets

from appliance.api.errors import BadRequest, Conflict, Forbidden, NotFound
from appliance.api.fields import (UUID, Boolean, DateTime, Enum, Field, FieldType,
                                  FilterError, Integer, List, Object, Reference, String, Tags)
from appliance.api.links import Link
from appliance.api.resource import Action, Resource
from appliance.api.validation import Validator
from appliance.kinds import NETWORK_NETWORKS
from appliance.tenancy import is_platform
from state.collection import format_time, utcnow

from . import (console, disks, hypervisor_rules, machine_rules, migration, remote,
               volume_rules)
from .console import CONSOLE_TAIL, console_path
from .drivers import LOCAL_HYPER
from .hypervisor_rules import HYPERVISOR_NODE_LOCK
from .lifecycle import NEW, STATUSES, new_node, wants_power
from .placement import POLICY_KINDS, SOFT_ANTI
from .sets import delete_members, release_volumes

HOSTNAME = (r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
            r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
CORES = Integer(1, 4096)
RAM = Integer(512, 4194304)
NODES_PATH = "/v1/compute/nodes"
SETS_PATH = "/v1/compute/sets"
NODES, SETS, VOLUMES = "compute_nodes", "compute_sets", "compute_volumes"
POLICIES, HYPERVISORS, NETWORKS = ("compute_placement_policies", "compute_hypervisors",
                                   NETWORK_NETWORKS)
NODE_REF = {"$ref": "#/components/schemas/Node"}
# HW addresses are checked for uniqueness and written under this lock (named: taken
# before the quota and kind locks)
ADDRESS_LOCK = "compute-hw-address"
VOLUME_REF = {"$ref": "#/components/schemas/Volume"}


class Number(FieldType):
    type_name = "number"

    def __init__(self, minimum, maximum):
        self.minimum, self.maximum = minimum, maximum

    def schema(self):
        return {"type": "number", "minimum": self.minimum, "maximum": self.maximum}

    def parse_filter(self, text):
        try:
            return float(text)
        except ValueError:
            raise FilterError("must be a number") from None


def base_fields(scoped=True):
    fields = [Field("name", String(255), default="", nullable=False),
              Field("description", String(255), default="", nullable=False)]
    if scoped:
        fields.append(Field("project_id", UUID(), required=True, create_only=True))
    return fields


def status_fields(what):
    return [Field("status", Enum(*STATUSES), read_only=True, description=what),
            Field("status_reason", String(4096), read_only=True,
                  description="why the status is ERROR; null otherwise")]


class ComputeResource(Resource):
    """What every compute resource shares; the rules its hooks call are in
    machine_rules.py, hypervisor_rules.py and volume_rules.py (lifecycle.py for what the
    daemon follows too)."""

    def _normalize(self, body, current=None):
        # the reference's clients send `default_network: {}` in their bodies: an empty
        # object asks for nothing (docs/compute.md, "Bodies of the reference's clients")
        if self.field("default_network") is not None and body.get("default_network") == {}:
            body = {k: v for k, v in body.items() if k != "default_network"}
        return super()._normalize(body, current)

    def store_kind(self, kind):
        return self.api.store.collection(kind)

    def invoke_update(self, record, changes):
        return self.render(self.collection().update(record["uuid"], changes,
                                                    expect_revision=record["revision"]))


# ---- hypervisors ------------------------------------------------------------------------

# the reference's local_hyper takes a list of pools; its own CLI (`hypervisors init --add`)
# sends a plain name: both are accepted. One pool: the daemon places on one pool per
# hypervisor
_LOCAL_POOLS = {"type": "array", "minItems": 1, "maxItems": 1, "items": {
    "type": "object", "additionalProperties": False, "required": ["name"],
    "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 255},
                   "tier": {"type": ["string", "null"], "maxLength": 64},
                   "ephemeral": {"type": "boolean"}}}}
_POOL_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
LIBVIRT_SPEC = {
    "type": "object", "additionalProperties": False, "required": ["kind", "connection_uri"],
    "properties": {
        "kind": {"enum": ["libvirt", LOCAL_HYPER]},
        "connection_uri": {"type": "string", "minLength": 1, "maxLength": 2048},
        "storage_pool": {"anyOf": [_POOL_NAME, _LOCAL_POOLS]},
        "machine_prefix": {"type": "string", "maxLength": 64,
                           "pattern": r"^[A-Za-z0-9_.-]*$"},
        "network": {"type": ["string", "null"], "maxLength": 255},
        "network_type": {"enum": ["network", "bridge"]},
        "iface_rom_file": {"type": ["string", "null"], "maxLength": 4096},
        "iface_mtu": {"type": "integer", "minimum": 0, "maximum": 65536},
        "iface_source": {"type": ["string", "null"], "maxLength": 255},
        "node": {"type": "string", "format": "uuid"},
        "migration_address": {"type": ["string", "null"], "maxLength": 255,
                              "pattern": r"^[A-Za-z0-9.:_-]+$",
                              "description": "the host or address other hypervisors' "
                                             "QEMU reach this one at to move a node "
                                             "here; default: the connection_uri's host"},
        "host_key": {"type": ["string", "null"], "maxLength": 16384},
        "underlay_address": {"type": ["string", "null"], "maxLength": 15},
    },
    "description": "kind libvirt: connection_uri (required), storage_pool (default), "
                   "machine_prefix (vm-), and the reference's network fields; kind "
                   f"{LOCAL_HYPER}: the same plus node (required: the admin project's HW "
                   "node this libvirt runs on), storage_pool a name or [{name, tier, "
                   "ephemeral}] (one pool); a qemu+ssh:// connection_uri needs host_key, "
                   "the host's SSH public key line (ssh-keyscan), pinned; underlay_address "
                   "(optional, both kinds): the hypervisor's IPv4 address that VXLAN "
                   "tunnels carry project networks to from the other hypervisors "
                   "(docs/network.md)"}


def hypervisor_fields():
    capacity = "from libvirt, written by the compute daemon"
    return base_fields(scoped=False) + [
        Field("driver_spec", Object(LIBVIRT_SPEC), required=True),
        Field("connection_uri", String(2048), hidden=True),
        Field("agent", UUID()),
        Field("builder", UUID()),
        Field("machine_type", Enum("VM"), default="VM", nullable=False,
              description="VM only: HW machines have no driver"),
        Field("cores_ratio", Number(0.01, 1000), default=1.0, nullable=False,
              description="CPU overcommit"),
        Field("ram_ratio", Number(0.01, 1000), default=1.0, nullable=False,
              description="RAM overcommit"),
        Field("status", Enum("IN_PROGRESS", "ACTIVE", "ERROR"), read_only=True,
              description="IN_PROGRESS after a write, then ACTIVE or ERROR"),
        Field("status_reason", String(4096), read_only=True,
              description="the libvirt error (status ERROR)"),
        Field("all_cores", Integer(), read_only=True, description=capacity),
        Field("all_ram", Integer(), read_only=True, description="MB; " + capacity),
        Field("all_disk", Integer(), read_only=True,
              description="GB, the storage pool's capacity"),
        # the reference's CLI sends these (its `init --add` always: measured on
        # the host); accepted on create, then the daemon's measure replaces them
        Field("avail_cores", Integer(0, 1 << 31), create_only=True,
              description="all x ratio minus what placed nodes use; " + capacity
              + " (a value given on create is accepted and replaced)"),
        Field("avail_ram", Integer(0, 1 << 40), create_only=True,
              description="MB; as avail_cores"),
        Field("avail_disk", Integer(), read_only=True),
        Field("accel", Enum("kvm", "tcg"), read_only=True,
              description="the accelerator guests get here: kvm once a KVM guest was "
                          "seen to run its firmware, tcg otherwise; null for a driver "
                          "that is not QEMU (test:///)"),
        Field("accel_reason", String(4096), read_only=True,
              description="why accel is what it is (the compute daemon's KVM probe)"),
        Field("arch", String(64), read_only=True,
              description="the host's CPU architecture, from libvirt (a node moves "
                          "only between hypervisors of one arch and one accel)"),
        Field("ssh_public_key", String(1024), read_only=True,
              description="the appliance's SSH public key (one for all hypervisors): "
                          "install it in the authorized_keys of a qemu+ssh hypervisor's "
                          "user"),
    ]


class Hypervisors(ComputeResource):
    def __init__(self):
        super().__init__(
            name="Hypervisor", path="/v1/compute/hypervisors", kind=HYPERVISORS,
            service="compute", policy="hypervisor", unique=[("connection_uri",)],
            description="a libvirt connection that runs nodes (the reference's MachinePool); "
                        "admin only",
            fields=hypervisor_fields())

    def admit(self, call):
        if not is_platform(call.principal):
            raise Forbidden("hypervisors are the platform's: use an unscoped token or one "
                            "scoped to the admin project")

    # one hypervisor per node: the spec's check and the write under one named lock,
    # else two registrations of one node at once (agents retrying `init --add`) both pass
    def create_record(self, call, body):
        with self.api.store.named_lock(HYPERVISOR_NODE_LOCK):
            return super().create_record(call, body)

    def update_record(self, call, uuid, body):
        with self.api.store.named_lock(HYPERVISOR_NODE_LOCK):
            return super().update_record(call, uuid, body)

    def prepare_create(self, call, record):
        return hypervisor_rules.new_hypervisor(self.api.store, call, record)

    def prepare_update(self, call, current, changes):
        return hypervisor_rules.hypervisor_changes(self.api.store, call, current, changes)

    def render(self, record, only=None):
        # the platform's key, not the record's: every platform caller reads the same one
        return super().render({**record, "ssh_public_key": remote.public_key(self.api.store)},
                              only)

    def declared_links(self):
        return [Link(NODES, HYPERVISORS, field="hypervisor",
                     message=lambda hypervisor, placed: f"hypervisor {hypervisor['uuid']} "
                     f"runs {len(placed)} node(s): delete or move them first"),
                Link(VOLUMES, HYPERVISORS, field="hypervisor")]


# ---- placement policies -----------------------------------------------------------------

class PlacementPolicies(ComputeResource):
    def __init__(self):
        super().__init__(
            name="PlacementPolicy", path="/v1/compute/placement_policies",
            kind=POLICIES, service="compute", policy="placement_policy",
            project_scoped=True,
            description="affinity or anti-affinity, hard (refuse) or soft (prefer), among "
                        "the nodes that name the policy",
            fields=base_fields() + [
                Field("kind", Enum(*POLICY_KINDS), default=SOFT_ANTI,
                      nullable=False, create_only=True),
            ])

    def declared_links(self):
        return [Link(kind, POLICIES, label="placement_policies",
                     values=lambda r: r.get("placement_policies") or ())
                for kind in (NODES, SETS)]


# ---- nodes --------------------------------------------------------------------------------

def machine_fields():
    """What nodes and sets share: the shape of a machine."""
    return [
        Field("cores", CORES, required=True),
        Field("ram", RAM, required=True, description="MB"),
        Field("node_type", Enum("VM", "HW"), default="VM", nullable=False, create_only=True),
        # left out of a HW machine's reads, not rendered null: the reference's CLI reads
        # a missing disk_spec as "Unknown" and fails on a null one (`compute nodes list`
        # broke on the appliance's own node, and on make run's development node)
        Field("disk_spec", Object(disks.FIELD_SCHEMA, kinds={
            "root_disk": disks.ROOT_DISK, "disks": disks.DISKS}), omit_unset=True,
              description=disks.FIELD_SCHEMA["description"] + "; required for VM, left out "
                          "for HW"),
        Field("placement_policies", List(UUID(), max_items=16), default=list,
              nullable=False, description="uuids of placement policies of the project"),
        Field("network", UUID(), create_only=True,
              description="a network of the project; null: the project's default network"),
    ]


def seal_agent_key(box, node_uuid):
    """A new node key as the reference makes it (32 random bytes, base64: 44
    characters), sealed like secrets (`box`: a secret.crypto.SecretBox)."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    return box.seal(NODES, node_uuid, "agent_key", key)


def node_fields():
    return base_fields() + machine_fields() + [
        Field("hostname", String(253, pattern=HOSTNAME)),
        Field("address", String(15),
              description="HW only: the IPv4 address the machine has on its "
                          "network, set by the operator and shown in "
                          "default_network.ipv4; for a project's node, a host of "
                          "one of its networks or of an outside network an admin "
                          "allows (docs/compute.md). VM nodes get theirs from "
                          "IPAM: null"),
        Field("hypervisor", UUID(), read_only=True, description="picked by placement"),
        Field("default_network", Object(), read_only=True,
              description="{network, subnet, port, ipv4, mask, mac, gateway, dns} "
                          "once the node has its port (VM) or its address (HW); "
                          "{} before"),
        Field("node_set", Reference(SETS_PATH), read_only=True,
              description="the set the node is a member of"),
        Field("set_index", Integer(), hidden=True),
        Field("agent_key", String(), hidden=True),
        Field("power_state", Enum("on", "off"), read_only=True,
              description="the desired power, set by power_on / power_off"),
        Field("reboot_requested_at", DateTime(), read_only=True,
              description="set by the action reboot"),
        Field("migration", Object(), read_only=True,
              description="the last move to another hypervisor (action migrate): "
                          "{target, source, requested_at, state (requested, running, "
                          "done, refused, failed), progress (percent), reason, "
                          "finished_at}; null when never moved"),
    ] + status_fields("NEW, SCHEDULED, IN_PROGRESS, ACTIVE or ERROR; a PUT sets "
                      "IN_PROGRESS")


def node_actions(nodes):
    """The actions of `nodes` (a Nodes resource), their handlers its NodeActions."""
    return [
        Action("power_on", nodes.power_on, summary="Power the node on",
               response_schema=NODE_REF),
        Action("power_off", nodes.power_off, summary="Power the node off",
               response_schema=NODE_REF),
        Action("reboot", nodes.reboot, summary="Reboot the node",
               response_schema=NODE_REF),
        Action("migrate", nodes.migrate, request_schema=MIGRATE_BODY,
               summary="Move the node to another hypervisor, live (the daemon moves it; "
                       "follow `migration`); platform callers only",
               response_schema=NODE_REF),
        Action("details", nodes.details, method="GET",
               permission="compute.node.read", summary="The node's hypervisor",
               response_schema={"type": "object", "properties": {
                   "hypervisor": {"type": ["string", "null"]}}}),
        Action("get_private_key", nodes.get_private_key, method="GET",
               summary="The node's agent key (a bare JSON string)",
               response_schema={"type": "string"}),
        Action("console", nodes.console, method="GET",
               summary=f"The serial console log: its tail ({CONSOLE_TAIL} bytes), or "
                       f"what follows byte `offset` (at most {CONSOLE_TAIL} bytes)",
               parameters=[{"name": "offset", "in": "query", "required": False,
                            "description": "bytes from the log's start: answer what "
                                           "follows (a follower passes the last "
                                           "next_offset)",
                            "schema": {"type": "integer", "minimum": 0}}],
               response_schema={"type": "object", "required": ["log"], "properties": {
                   "log": {"type": "string"},
                   "offset": {"type": "integer", "description": "byte of log's start"},
                   "next_offset": {"type": "integer",
                                   "description": "the offset to ask next"},
                   "size": {"type": "integer", "description": "the log's size now"},
                   "reset": {"type": "boolean",
                             "description": "the log was started anew: offset was past "
                                            "its end, the answer starts at 0"}}}),
    ]


MIGRATE_BODY = {"type": "object", "additionalProperties": False, "properties": {
    "hypervisor": {"type": ["string", "null"],
                   "description": "uuid or path of the target hypervisor; left out: "
                                  "placement picks the best other one"}}}
MIGRATE = Validator(MIGRATE_BODY)
HYPERVISORS_PATH = "/v1/compute/hypervisors"


class NodeActions(ComputeResource):
    """The HTTP mapping of a node's actions (Nodes declares them)."""

    def migrate(self, call, record):
        # hypervisors are the platform's: where a node runs is the platform's choice,
        # named or left to placement (docs/security.md, compute)
        if not is_platform(call.principal):
            raise Forbidden("moving a node between hypervisors is the platform's: ask an "
                            "administrator (a token unscoped or scoped to the admin "
                            "project)")
        body = call.body if call.body is not None else {}
        MIGRATE.check(body)
        target = body.get("hypervisor")
        if target is not None:
            target = Reference(HYPERVISORS_PATH).to_input(target)
        store = self.api.store
        with store.named_lock(migration.LOCK):
            current = self.collection().get(record["uuid"]) or record
            try:
                chosen = migration.check(
                    current, self.store_kind(HYPERVISORS).records(),
                    self.collection().records(),
                    {p["uuid"]: p for p in self.store_kind(POLICIES).records()}, target)
            except migration.Refused as e:
                raise (NotFound if e.status == 404 else Conflict)(str(e)) from None
            return self.invoke_update(current, {"migration": migration.request(
                chosen, format_time(utcnow()), current["hypervisor"])})

    def power_on(self, call, record):
        return self.invoke_update(record, {"power_state": "on"})

    def power_off(self, call, record):
        return self.invoke_update(record, {"power_state": "off"})

    def reboot(self, call, record):
        if not wants_power(record):
            raise Conflict(f"node {record['uuid']} is powered off: power it on instead")
        return self.invoke_update(record, {"reboot_requested_at": format_time(utcnow())})

    def details(self, call, record):
        return {"hypervisor": record.get("hypervisor")}

    def get_private_key(self, call, record):
        sealed = record.get("agent_key")
        if sealed is None:
            # a node recorded without the API (first boot's own node) gets its key now
            sealed = seal_agent_key(self.box, record["uuid"])
            sealed = self.collection().mutate(
                record["uuid"], lambda r: {**r, "agent_key": r.get("agent_key") or sealed}
            )["agent_key"]
        return self.box.open(self.kind, record["uuid"], "agent_key", sealed)

    def console(self, call, record):
        values = call.query.getall("offset")
        offset = None
        if values:
            if len(values) != 1 or not re.fullmatch(r"[0-9]{1,18}", values[0]):
                raise BadRequest("offset: a byte count, 0 or more (the next_offset of "
                                 "the last answer)")
            offset = int(values[0])
        return console.read_from(console_path(self.api.settings, record["uuid"]), offset)


class Nodes(NodeActions):
    def __init__(self):
        super().__init__(
            name="Node", path=NODES_PATH, kind=NODES, service="compute", policy="node",
            project_scoped=True,
            description="a virtual machine (or a HW machine) of a project",
            fields=node_fields(), actions=node_actions(self))

    # a set's members go with it (Sets.after_delete)
    part_of = ("node_set",)

    def declared_links(self):
        return [Link(NODES, NETWORKS, field="network"),
                # the attachment is written on the volume: the node holds it
                Link(NODES, VOLUMES, held_by="node",
                     message=lambda volume, _: f"volume {volume['uuid']} is attached to node "
                                               f"{volume['node']}: detach it first")]

    def register(self, api):
        super().register(api)
        from appliance.secret.crypto import SecretBox
        self.box = SecretBox(api.store)

    def prepare_create(self, call, record):
        store, settings = self.api.store, self.api.settings
        machine_rules.check_machine(store, settings, call, record)
        record.update(new_node(), agent_key=seal_agent_key(self.box, record["uuid"]))
        if record.get("address") is not None:
            record["address"] = machine_rules.checked_address(store, settings, call, record,
                                                              record["address"])
            record["default_network"] = machine_rules.hw_default_network(
                store, record, record["address"])
        return record

    def prepare_update(self, call, current, changes):
        return machine_rules.node_update(self.api.store, self.api.settings, call, current,
                                         changes)

    def _normalize(self, body, current=None):
        machine_rules.check_default_network(body, current)
        return super()._normalize(body, current)

    # one address one node: the check and the write under one lock
    def create_record(self, call, body):
        if isinstance(body, dict) and body.get("address") is not None:
            with self.api.store.named_lock(ADDRESS_LOCK):
                return super().create_record(call, body)
        return super().create_record(call, body)

    def update_record(self, call, uuid, body):
        if isinstance(body, dict) and body.get("address") is not None:
            with self.api.store.named_lock(ADDRESS_LOCK):
                return super().update_record(call, uuid, body)
        return super().update_record(call, uuid, body)

    def after_delete(self, call, record):
        release_volumes(self.api.store, [record["uuid"]])


# ---- sets -----------------------------------------------------------------------------------

class Sets(ComputeResource):
    def __init__(self):
        super().__init__(
            name="Set", path=SETS_PATH, kind=SETS, service="compute", policy="set",
            project_scoped=True,
            description="replicas nodes of one shape; members are ordinary nodes named "
                        "<set>-<n> (docs/compute.md)",
            fields=base_fields() + [Field("tags", Tags())] + machine_fields() + [
                Field("replicas", Integer(0, 4096), default=1, nullable=False),
                Field("set_type", Enum("SET"), default="SET", nullable=False),
                Field("nodes", Object(), read_only=True,
                      description="{node uuid: {name, ipv4, status}} of the members"),
                Field("default_network", Object(), read_only=True,
                      description="{}: each member has its own (its default_network, and "
                                  "nodes[*].ipv4 here); a body may carry {} as the "
                                  "reference's clients send it"),
            ] + status_fields("ACTIVE when every member is ACTIVE; ERROR with the first "
                              "failed member's reason"),
            actions=[Action("get_private_keys", self.get_private_keys, method="GET",
                            summary="The members' agent keys {node uuid: key}",
                            response_schema={"type": "object", "additionalProperties": {
                                "type": "string"}})])

    def declared_links(self):
        return [Link(SETS, NETWORKS, field="network")]

    def prepare_create(self, call, record):
        machine_rules.check_machine(self.api.store, self.api.settings, call, record)
        record.update(NEW, nodes={}, default_network={})
        return record

    def prepare_update(self, call, current, changes):
        return machine_rules.machine_changes(self.api.store, self.api.settings, call,
                                             current, changes)

    def after_delete(self, call, record):
        # members go with the set at once; sets.reconcile_sets also removes any left over
        delete_members(self.api.store, {record["uuid"]})

    def get_private_keys(self, call, record):
        nodes = self.api.resources[NODES_PATH]
        return {m["uuid"]: nodes.get_private_key(call, m)
                for m in self.store_kind(NODES).by("node_set", record["uuid"])}


# ---- volumes --------------------------------------------------------------------------------

NODE_BODY = {"type": "object", "additionalProperties": False, "required": ["node"],
             "properties": {"node": {"type": "string", "description": "node uuid or path"}}}
ATTACH_BODY = Validator(NODE_BODY)


def volume_fields():
    return base_fields() + [
        Field("size", Integer(1, 1000000), required=True, description="GB"),
        Field("image", String(255), description="http(s) URL to fill it from"),
        Field("boot", Boolean(), default=True, nullable=False),
        Field("label", String(127)),
        Field("device_type", String(64), default="", nullable=False,
              description="deprecated, as in the reference"),
        Field("tier", Enum(*disks.TIERS), default="WARM", nullable=False,
              create_only=True),
        Field("ephemeral", Boolean(), default=True, nullable=False, create_only=True),
        Field("node", Reference(NODES_PATH), create_only=True,
              description="the node it is attached to; changed by the actions "
                          "attach and detach"),
        Field("hypervisor", UUID(), read_only=True,
              description="where the volume lives, set by the daemon"),
    ] + status_fields("NEW, IN_PROGRESS, ACTIVE or ERROR; a PUT sets IN_PROGRESS")


class Volumes(ComputeResource):
    def __init__(self):
        super().__init__(
            name="Volume", path="/v1/compute/volumes", kind=VOLUMES, service="compute",
            policy="volume", project_scoped=True,
            description="a data disk in the hypervisor's storage pool, attached to at most "
                        "one node",
            fields=volume_fields(),
            actions=[
                Action("attach", self.attach, request_schema=NODE_BODY,
                       response_schema=VOLUME_REF,
                       summary="Attach to a node of the same project"),
                Action("detach", self.detach, summary="Detach from its node",
                       response_schema=VOLUME_REF),
            ])

    def load_node(self, call, uuid):
        return self.api.resources[NODES_PATH].load_visible(call, uuid)

    def prepare_create(self, call, record):
        node = record.get("node")
        node_uuid = None if node is None else Reference(NODES_PATH).to_input(node)
        return volume_rules.new_volume(self.api.store, self.api.settings, call, record,
                                       node_uuid, self.load_node)

    def prepare_update(self, call, current, changes):
        return volume_rules.volume_changes(self.api.store, self.api.settings, call,
                                           current, changes)

    # a node's delete releases its volumes (sets.release_volumes)
    part_of = ("node",)

    def attach(self, call, record):
        body = call.body if call.body is not None else {}
        ATTACH_BODY.check(body)
        node = Reference(NODES_PATH).to_input(body["node"])
        return self.invoke_update(record, volume_rules.attach(call, record, node,
                                                              self.load_node))

    def detach(self, call, record):
        return self.invoke_update(record, volume_rules.detach(record))


def all_resources():
    return [Hypervisors(), PlacementPolicies(), Nodes(), Sets(), Volumes()]
