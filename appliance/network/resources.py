"""Network API: project networks (CRUD) and their ports (read only; IPAM makes them).

The reference has no API for either (reference-api.md section 2); the fields follow its
Subnet and Port where it has them. A network's layout (gateway, DNS, leases) and bridge
are derived at create; its cidr and routing never change afterwards (a change would mean
renumbering the nodes on it, or tearing its bridge down under them).
"""

from appliance.api.errors import BadRequest, Conflict
from appliance.api.fields import UUID, Boolean, Enum, Field, Integer, Reference, String
from appliance.api.resource import Resource

from . import ipam
from .networks import (CIDR_LOCK, NETWORK_UNIQUE, NETWORKS, PORT_UNIQUE, PORTS, CidrConflict,
                       holds, ports, prepare)

NETWORK_PATH = "/v1/network/networks"
STATUSES = ("NEW", "IN_PROGRESS", "ACTIVE", "ERROR")
IPV4 = r"^[0-9]{1,3}(\.[0-9]{1,3}){3}$"


def _address(name, description):
    return Field(name, String(15), read_only=True, description=description)


class Networks(Resource):
    def __init__(self, settings):
        self.settings = settings
        super().__init__(
            name="Network", path=NETWORK_PATH, kind=NETWORKS, service="network",
            policy="network", project_scoped=True, unique=NETWORK_UNIQUE,
            description="an L2 network of a project on its own bridge, with DHCP",
            fields=[
                Field("name", String(255), default="", nullable=False),
                Field("description", String(255), default="", nullable=False),
                Field("project_id", UUID(), required=True, create_only=True),
                Field("cidr", String(18), create_only=True,
                      description="a private IPv4 network, /29 or larger; default: the next "
                                  "free /24 of the project_networks setting"),
                Field("routing", Enum(*ipam.ROUTINGS), create_only=True,
                      default=settings["network_routing"], nullable=False,
                      description="isolated (no way out) or nat (NATed to the uplink)"),
                _address("gateway", "the hypervisor's address on the network (.1)"),
                _address("dns", "the DNS server handed to nodes (.2)"),
                _address("dhcp_start", "the first lease"),
                _address("dhcp_end", "the last lease"),
                Field("bridge", String(15), read_only=True,
                      description="the Linux bridge on each hypervisor"),
                Field("vni", Integer(), read_only=True,
                      description="the VXLAN id that carries the network between "
                                  "hypervisors (given by the platform)"),
                Field("home_hypervisor", UUID(), read_only=True,
                      description="the hypervisor that holds the gateway and DHCP (the "
                                  "first that ran a node of it)"),
                Field("default", Boolean(), read_only=True,
                      description="the project's default network (nodes without a network)"),
                Field("status", Enum(*STATUSES), read_only=True),
                Field("status_reason", String(4096), read_only=True),
                Field("default_of", String(36), hidden=True),
            ])

    def create_record(self, call, body):
        # the cidr is chosen and checked against the other networks, and inserted, under
        # one cross-process lock (taken before any kind's lock, as Store.named_lock wants)
        with call.store.named_lock(CIDR_LOCK):
            return super().create_record(call, body)

    def prepare_create(self, call, record):
        try:
            return prepare(call.store, self.settings, {**record, "default": False})
        except ValueError as e:
            raise BadRequest(str(e)) from None
        except CidrConflict as e:
            raise Conflict(str(e)) from None

    def check_delete(self, call, record):
        count = len(ports(call.store).by("network", record["uuid"]))
        if count:
            raise Conflict(f"network {record['uuid']} has {count} port(s): delete its nodes "
                           "first (a port goes once the compute daemon removed its node)")

    def delete_record(self, call, uuid):
        # under the ports lock: no port can be given on the network between the check
        # and the delete (ports.allocate inserts under the same lock)
        with ports(call.store).lock:
            gone = super().delete_record(call, uuid)
        # the network's address holds (ports.py) go with it
        holds(call.store).delete_where(lambda h: h["network"] == uuid)
        return gone


class Ports(Resource):
    # a node's ports go once the compute daemon removed the node
    part_of = ("node",)

    def __init__(self):
        super().__init__(
            name="Port", path="/v1/network/ports", kind=PORTS, service="network",
            policy="port", project_scoped=True, unique=PORT_UNIQUE,
            operations=("list", "get"),
            description="a node's address and MAC on a network, given by IPAM",
            fields=[
                Field("network", Reference(NETWORK_PATH), read_only=True),
                Field("node", Reference("/v1/compute/nodes"), read_only=True),
                Field("project_id", UUID(), read_only=True),
                Field("ipv4", String(15, pattern=IPV4), read_only=True),
                Field("mask", String(15, pattern=IPV4), read_only=True),
                Field("mac", String(17), read_only=True, description="52:54:00:xx:xx:xx"),
                Field("status", Enum(*STATUSES), read_only=True,
                      description="ACTIVE once its DHCP host entry is on the hypervisor"),
            ])


def all_resources(settings):
    return [Networks(settings), Ports()]
