"""The compute API: hypervisors, placement policies, nodes, node sets and volumes.

Shapes follow the reference (docs/compute.md); the API writes what a client asks for and
the compute daemon (crec's `reconcile.py`) moves statuses on. Set members are ordinary
nodes that `sets.reconcile_sets` creates and deletes.
"""

import base64
import ipaddress
import os
import re
import secrets

from appliance.api.errors import BadRequest, Conflict, Forbidden, NotFound
from appliance.api.fields import (UUID, Boolean, DateTime, Enum, Field, FieldType,
                                  FilterError, Integer, List, Object, Reference, String, Tags,
                                  UUID_RE)
from appliance.api.links import Link
from appliance.api.resource import Action, Resource
from appliance.api.validation import Validator
from appliance.kinds import ADMIN_PROJECT, NETWORK_NETWORKS, NETWORK_PORTS
from appliance.tenancy import addresses, is_platform
from appliance.tenancy import nodes as node_rules
from state.collection import format_time, utcnow

from . import disks
from .sets import release_volumes

STATUSES = ("NEW", "SCHEDULED", "IN_PROGRESS", "STARTED", "ACTIVE", "ERROR")
POLICY_KINDS = ("soft-anti-affinity", "hard-anti-affinity", "soft-affinity", "hard-affinity")
HOSTNAME = (r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
            r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
CORES = Integer(1, 4096)
RAM = Integer(512, 4194304)
NODES_PATH = "/v1/compute/nodes"
SETS_PATH = "/v1/compute/sets"
NODES, SETS, VOLUMES = "compute_nodes", "compute_sets", "compute_volumes"
POLICIES, HYPERVISORS, NETWORKS = ("compute_placement_policies", "compute_hypervisors",
                                   NETWORK_NETWORKS)
CONSOLE_TAIL = 64 * 1024
# fields a set owns on its members: a PUT of them on a member is refused
SET_OWNED = ("cores", "ram", "disk_spec", "placement_policies")
NODE_REF = {"$ref": "#/components/schemas/Node"}
# an IPv4 address as typed, nothing around it (ipaddress alone is not the check: the text
# is stored and shown as given)
# HW addresses are checked for uniqueness and written under this lock (named: taken
# before the quota and kind locks)
ADDRESS_LOCK = "compute-hw-address"
IPV4_TEXT = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3}){3}\Z")
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


def artifact_lookup(artifacts, call, project_id):
    """The repository artifacts (`artifacts`: their collection) a caller may boot from:
    those of the project's repositories and of the shared ones (admin project); any of
    them for the platform."""
    platform = is_platform(call.principal)

    def visible(uuid):
        record = artifacts.get(uuid)
        if record is None or platform or record.get("project_id") in (project_id,
                                                                      ADMIN_PROJECT):
            return record
        return None
    return visible


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
    def _normalize(self, body, current=None):
        # the reference's clients send `default_network: {}` in their bodies: an empty
        # object asks for nothing (docs/compute.md, "Bodies of the reference's clients")
        if self.field("default_network") is not None and body.get("default_network") == {}:
            body = {k: v for k, v in body.items() if k != "default_network"}
        return super()._normalize(body, current)

    def store_kind(self, kind):
        return self.api.store.collection(kind)

    def check_policies(self, project_id, uuids):
        if len(set(uuids)) != len(uuids):
            raise BadRequest("placement_policies: must not repeat a policy")
        found = self.store_kind(POLICIES)
        for uuid in uuids:
            policy = found.get(uuid)
            if policy is None or policy.get("project_id") != project_id:
                raise BadRequest(f"placement_policies: no placement policy {uuid} in "
                                 f"project {project_id}")

    def check_network(self, project_id, uuid):
        if uuid is None:
            return
        network = self.store_kind(NETWORKS).get(uuid)
        if network is None or network.get("project_id") != project_id:
            raise BadRequest(f"network: no network {uuid} in project {project_id}")

    def artifacts(self, call, project_id):
        return artifact_lookup(self.store_kind("repo_artifacts"), call, project_id)

    def check_machine(self, call, record):
        """A new node or set: its disks, policies and network checked (400/403)."""
        project = record["project_id"]
        record["disk_spec"] = self.check_disk_spec(call, record, record["node_type"], project)
        self.check_policies(project, record["placement_policies"])
        self.check_network(project, record.get("network"))

    def machine_changes(self, call, current, changes):
        """A PUT of a node or a set: its disks and policies checked, and IN_PROGRESS
        again (the reference's "PUT resets status")."""
        if "disk_spec" in changes:
            changes["disk_spec"] = self.check_disk_spec(call, changes, current["node_type"],
                                                        current["project_id"],
                                                        current.get("disk_spec"))
        if "placement_policies" in changes:
            self.check_policies(current["project_id"], changes["placement_policies"])
        changes["status"], changes["status_reason"] = "IN_PROGRESS", None
        return changes

    def reach(self, call, project_id):
        """The caller's address rule for images of `project_id` (tenancy/addresses)."""
        return addresses.for_caller(call.store, self.api.settings, call.principal,
                                    project_id)

    def check_disk_spec(self, call, record, node_type, project_id, current=None):
        spec = record.get("disk_spec")
        if node_type == "HW":
            if spec is not None:
                raise BadRequest("disk_spec: a HW node gets no disks (leave it null)")
            return None
        if spec is None:
            raise BadRequest("disk_spec: required for node_type VM")
        spec = disks.normalize(spec, is_platform(call.principal),
                               self.artifacts(call, project_id),
                               self.reach(call, project_id))
        if current is not None:
            disks.check_change(current, spec)
        return spec

    def invoke_update(self, record, changes):
        return self.render(self.collection().update(record["uuid"], changes,
                                                    expect_revision=record["revision"]))


# ---- hypervisors ------------------------------------------------------------------------

LOCAL_HYPER = "exordos_local_hyper"
HYPERVISOR_NODE_LOCK = "hypervisor-nodes"
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
    },
    "description": "kind libvirt: connection_uri (required), storage_pool (default), "
                   "machine_prefix (vm-), and the reference's network fields; kind "
                   f"{LOCAL_HYPER}: the same plus node (required: the admin project's HW "
                   "node this libvirt runs on), storage_pool a name or [{name, tier, "
                   "ephemeral}] (one pool)"}
DRIVER_DEFAULTS = {"storage_pool": "default", "machine_prefix": "vm-"}


class Hypervisors(ComputeResource):
    def __init__(self):
        capacity = "from libvirt, written by the compute daemon"
        super().__init__(
            name="Hypervisor", path="/v1/compute/hypervisors", kind=HYPERVISORS,
            service="compute", policy="hypervisor", unique=[("connection_uri",)],
            description="a libvirt connection that runs nodes (the reference's MachinePool); "
                        "admin only",
            fields=base_fields(scoped=False) + [
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
                      description="the accelerator guests get here"),
            ])

    def admit(self, call):
        if not is_platform(call.principal):
            raise Forbidden("hypervisors are the platform's: use an unscoped token or one "
                            "scoped to the admin project")

    # one hypervisor per node: _driver_spec's check and the write under one named lock,
    # else two registrations of one node at once (agents retrying `init --add`) both pass
    def create_record(self, call, body):
        with self.api.store.named_lock(HYPERVISOR_NODE_LOCK):
            return super().create_record(call, body)

    def update_record(self, call, uuid, body):
        with self.api.store.named_lock(HYPERVISOR_NODE_LOCK):
            return super().update_record(call, uuid, body)

    def prepare_create(self, call, record):
        record["driver_spec"] = self._driver_spec(call, record["driver_spec"], record["uuid"])
        record["connection_uri"] = record["driver_spec"]["connection_uri"]
        record["status"], record["status_reason"] = "IN_PROGRESS", None
        record["avail_cores"] = record["avail_ram"] = None
        return record

    def prepare_update(self, call, current, changes):
        if "driver_spec" in changes:
            changes["driver_spec"] = self._driver_spec(call, changes["driver_spec"],
                                                       current["uuid"])
            changes["connection_uri"] = changes["driver_spec"]["connection_uri"]
        changes["status"], changes["status_reason"] = "IN_PROGRESS", None
        return changes

    def _driver_spec(self, call, spec, own_uuid):
        """The spec with its defaults; a local_hyper's `node` checked: it names the
        machine this libvirt runs on, so it must be a HW node of the admin project (the
        tenant rule of appliance/tenancy/nodes.py: a project's machine never hosts the
        platform's VMs), at most one hypervisor per node (409, as the reference)."""
        spec = {**DRIVER_DEFAULTS, **spec}
        if spec["kind"] != LOCAL_HYPER:
            if "node" in spec:
                raise BadRequest(f"driver_spec.node: only for kind {LOCAL_HYPER}")
            if not isinstance(spec["storage_pool"], str):
                raise BadRequest("driver_spec.storage_pool: a pool name for kind libvirt")
            return spec
        if "node" not in spec:
            raise BadRequest(f"driver_spec.node: required for kind {LOCAL_HYPER}: the "
                             "uuid of the HW node this libvirt runs on")
        store = self.api.store
        spec["node"], = node_rules.check_nodes(
            store, call.principal, ADMIN_PROJECT, "node", [spec["node"]],
            lambda i: "driver_spec.node")
        if store.collection(NODES).get(spec["node"]).get("node_type") != "HW":
            raise BadRequest(f"driver_spec.node: node {spec['node']} is a VM: a "
                             f"{LOCAL_HYPER} runs on a HW node")
        other = next((h for h in self.collection().records()
                      if h["uuid"] != own_uuid and (h.get("driver_spec") or {}).get("kind")
                      == LOCAL_HYPER and h["driver_spec"].get("node") == spec["node"]), None)
        if other is not None:
            raise Conflict(f"driver_spec.node: hypervisor {other['uuid']} already runs on "
                           f"node {spec['node']}: update that one")
        return spec

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
                Field("kind", Enum(*POLICY_KINDS), default="soft-anti-affinity",
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


class Nodes(ComputeResource):
    def __init__(self):
        super().__init__(
            name="Node", path=NODES_PATH, kind=NODES, service="compute", policy="node",
            project_scoped=True,
            description="a virtual machine (or a HW machine) of a project",
            fields=base_fields() + machine_fields() + [
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
            ] + status_fields("NEW, SCHEDULED, IN_PROGRESS, ACTIVE or ERROR; a PUT sets "
                              "IN_PROGRESS"),
            actions=[
                Action("power_on", self.power_on, summary="Power the node on",
                       response_schema=NODE_REF),
                Action("power_off", self.power_off, summary="Power the node off",
                       response_schema=NODE_REF),
                Action("reboot", self.reboot, summary="Reboot the node",
                       response_schema=NODE_REF),
                Action("details", self.details, method="GET",
                       permission="compute.node.read", summary="The node's hypervisor",
                       response_schema={"type": "object", "properties": {
                           "hypervisor": {"type": ["string", "null"]}}}),
                Action("get_private_key", self.get_private_key, method="GET",
                       summary="The node's agent key (a bare JSON string)",
                       response_schema={"type": "string"}),
                Action("console", self.console, method="GET",
                       summary=f"The tail ({CONSOLE_TAIL} bytes) of the serial console log",
                       response_schema={"type": "object", "required": ["log"],
                                        "properties": {"log": {"type": "string"}}}),
            ])

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
        self.check_machine(call, record)
        record.update(status="NEW", status_reason=None, default_network={},
                      power_state="on", agent_key=seal_agent_key(self.box, record["uuid"]))
        if record.get("address") is not None:
            record["address"] = self.checked_address(call, record, record["address"])
            record["default_network"] = self.hw_default_network(record, record["address"])
        return record

    def prepare_update(self, call, current, changes):
        if current.get("node_set") and any(f in changes and changes[f] != current.get(f)
                                           for f in SET_OWNED):
            raise Conflict(f"node {current['uuid']} is a member of set "
                           f"{current['node_set']}: change {', '.join(SET_OWNED)} on the set")
        if "address" in changes and changes["address"] != current.get("address"):
            given = changes["address"]
            if given is None:
                shown = current.get("default_network") or {}
                if shown.get("ipv4") == current.get("address"):
                    changes["default_network"] = {}
            else:
                changes["address"] = self.checked_address(call, current, given)
                changes["default_network"] = self.hw_default_network(current,
                                                                     changes["address"])
        changes = self.machine_changes(call, current, changes)
        if current.get("node_type") == "HW":
            # nothing moves a HW node's status on (no daemon builds it): a PUT leaves it
            changes.pop("status", None)
            changes.pop("status_reason", None)
        return changes

    def _normalize(self, body, current=None):
        given = body.get("default_network")
        if given not in (None, {}) and (current is None or given != current.get(
                "default_network")):
            raise Forbidden("default_network is read-only: a VM node's comes from its "
                            "network (IPAM); a HW node's follows `address`: set that")
        return super()._normalize(body, current)

    def create_record(self, call, body):
        if isinstance(body, dict) and body.get("address") is not None:
            # one address one node: the check and the write under one lock
            with self.api.store.named_lock(ADDRESS_LOCK):
                return super().create_record(call, body)
        return super().create_record(call, body)

    def update_record(self, call, uuid, body):
        if isinstance(body, dict) and body.get("address") is not None:
            with self.api.store.named_lock(ADDRESS_LOCK):
                return super().update_record(call, uuid, body)
        return super().update_record(call, uuid, body)

    def checked_address(self, call, node, given):
        """A HW node's `address` (docs/compute.md, docs/security.md "Addresses a project
        may reach"): an IPv4 address that the node's project may reach by the one address
        rule (tenancy/addresses; a platform caller sets any), and no other node's. 400/409
        otherwise."""
        if node.get("node_type") != "HW":
            raise BadRequest("address: only a HW node takes an address; a VM node gets "
                             "its own from its network (IPAM)")
        if not isinstance(given, str) or not IPV4_TEXT.match(given):
            raise BadRequest(f"address: {given!r} is not an IPv4 address like 192.0.2.10")
        try:
            address = str(ipaddress.IPv4Address(given))
        except ValueError:
            raise BadRequest(f"address: {given!r} is not an IPv4 address like "
                             "192.0.2.10") from None
        why = addresses.for_caller(call.store, self.api.settings, call.principal,
                                   node["project_id"]).refusal(address)
        if why is not None:
            raise BadRequest(f"address: {why}")
        for port in self.store_kind(NETWORK_PORTS).by("ipv4", address):
            if port.get("node") != node["uuid"]:
                raise Conflict(f"address: {address} is the address of node "
                               f"{port.get('node')} on its network")
        for other in self.store_kind(NODES).records():
            if other["uuid"] != node["uuid"] and \
                    (other.get("default_network") or {}).get("ipv4") == address:
                whose = f"node {other.get('name') or other['uuid']}" if \
                    other.get("project_id") == node["project_id"] else "another node"
                raise Conflict(f"address: {address} is already the address of {whose}")
        return address

    def hw_default_network(self, node, address):
        """`default_network` of a HW node at `address`: the project's network holding it
        (its mask, gateway and DNS), or nothing more than the address."""
        ip = ipaddress.IPv4Address(address)
        for network in self.store_kind(NETWORKS).by("project_id", node["project_id"]):
            try:
                net = ipaddress.IPv4Network(network.get("cidr") or "")
            except ValueError:
                continue
            if ip in net:
                return {"network": network["uuid"], "subnet": network["uuid"], "port": None,
                        "ipv4": address, "mask": str(net.netmask), "mac": None,
                        "gateway": network.get("gateway"), "dns": network.get("dns")}
        return {"network": None, "subnet": None, "port": None, "ipv4": address,
                "mask": None, "mac": None, "gateway": None, "dns": None}

    def after_delete(self, call, record):
        release_volumes(self.api.store, [record["uuid"]])

    def power_on(self, call, record):
        return self.invoke_update(record, {"power_state": "on"})

    def power_off(self, call, record):
        return self.invoke_update(record, {"power_state": "off"})

    def reboot(self, call, record):
        if record.get("power_state") == "off":
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
        path = console_path(self.api.settings, record["uuid"])
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - CONSOLE_TAIL))
                data = f.read(CONSOLE_TAIL)
        except FileNotFoundError:
            data = b""
        return {"log": data.decode("utf-8", errors="replace")}


def console_path(settings, node_uuid):
    """Where the daemon's libvirt `<serial type='file'>` writes a node's console."""
    return os.path.join(settings["state_dir"], "compute", "console", f"{node_uuid}.log")


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
        self.check_machine(call, record)
        record.update(status="NEW", status_reason=None, nodes={}, default_network={})
        return record

    def prepare_update(self, call, current, changes):
        return self.machine_changes(call, current, changes)

    def after_delete(self, call, record):
        # members go with the set at once; sets.reconcile_sets also removes any left over
        gone = self.store_kind(NODES).delete_where(lambda r: r.get("node_set") == record["uuid"])
        release_volumes(self.api.store, [m["uuid"] for m in gone])

    def get_private_keys(self, call, record):
        nodes = self.api.resources[NODES_PATH]
        return {m["uuid"]: nodes.get_private_key(call, m)
                for m in self.store_kind(NODES).by("node_set", record["uuid"])}


# ---- volumes --------------------------------------------------------------------------------

NODE_BODY = {"type": "object", "additionalProperties": False, "required": ["node"],
             "properties": {"node": {"type": "string", "description": "node uuid or path"}}}
ATTACH_BODY = Validator(NODE_BODY)


class Volumes(ComputeResource):
    def __init__(self):
        super().__init__(
            name="Volume", path="/v1/compute/volumes", kind=VOLUMES, service="compute",
            policy="volume", project_scoped=True,
            description="a data disk in the hypervisor's storage pool, attached to at most "
                        "one node",
            fields=base_fields() + [
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
            ] + status_fields("NEW, IN_PROGRESS, ACTIVE or ERROR; a PUT sets IN_PROGRESS"),
            actions=[
                Action("attach", self.attach, request_schema=NODE_BODY,
                       response_schema=VOLUME_REF,
                       summary="Attach to a node of the same project"),
                Action("detach", self.detach, summary="Detach from its node",
                       response_schema=VOLUME_REF),
            ])

    def attachable_node(self, call, volume_project, node_ref):
        nodes = self.api.resources[NODES_PATH]
        uuid = Reference(NODES_PATH).to_input(node_ref)
        if not isinstance(uuid, str) or not UUID_RE.match(uuid):
            raise BadRequest("node: must be a node uuid or path")
        node = nodes.load_visible(call, uuid)
        if node.get("project_id") != volume_project:
            raise NotFound(f"Node {uuid} not found")
        if node.get("node_type") == "HW":
            raise BadRequest(f"node: {uuid} is a HW node, which takes no volumes")
        return node

    def prepare_create(self, call, record):
        if record.get("image") is not None:
            disks.check_image("image", record["image"], is_platform(call.principal),
                              self.artifacts(call, record["project_id"]),
                              addresses.for_caller(call.store, self.api.settings,
                                                   call.principal, record["project_id"]))
        if record.get("node") is not None:
            self.attachable_node(call, record["project_id"], record["node"])
        record.update(status="NEW", status_reason=None)
        return record

    def prepare_update(self, call, current, changes):
        if changes.get("image") is not None:
            disks.check_image("image", changes["image"], is_platform(call.principal),
                              self.artifacts(call, current["project_id"]),
                              addresses.for_caller(call.store, self.api.settings,
                                                   call.principal, current["project_id"]))
        if changes.get("size", current["size"]) < current["size"]:
            raise BadRequest(f"size: a volume cannot shrink (from {current['size']} GB)")
        changes["status"], changes["status_reason"] = "IN_PROGRESS", None
        return changes

    # a node's delete releases its volumes (sets.release_volumes)
    part_of = ("node",)

    def attach(self, call, record):
        body = call.body if call.body is not None else {}
        ATTACH_BODY.check(body)
        if record.get("node"):
            raise BadRequest("Volume is already attached to a node")
        node = self.attachable_node(call, record["project_id"], body["node"])
        return self.invoke_update(record, {"node": node["uuid"], "status": "IN_PROGRESS",
                                           "status_reason": None})

    def detach(self, call, record):
        if not record.get("node"):
            raise BadRequest("Volume is not attached to a node")
        return self.invoke_update(record, {"node": None, "status": "IN_PROGRESS",
                                           "status_reason": None})


def all_resources():
    return [Hypervisors(), PlacementPolicies(), Nodes(), Sets(), Volumes()]
