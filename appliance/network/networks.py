"""Network and port records in the store: their kinds, unique keys and locks, and the one
way a network record is made (by the API or by IPAM for a project's default network).

Rules that span records are kept by the store, across processes:
- a cidr is chosen and checked against every other network under one named lock, so two
  creators never pick overlapping cidrs;
- one default network per project: the unique key `default_of` (the project for a default
  network, the network's own uuid otherwise, so that non-default ones never collide);
- one VXLAN id per network (`vni`), chosen under the same lock as the cidr, as the cidr
  is (no unique key: networks made before it have none, until `ensure_vni`): the tunnel
  that carries the network between hypervisors (docs/network.md);
- ports: unique (network, ipv4), (mac) and (node);
- an address released by a port is held for a DHCP lease's time (`holds`): the network's
  dnsmasq keeps the departed MAC's lease that long and would refuse the address to the
  next MAC (docs/network.md, "Addresses").
Lock order: the cidr lock, then the ports kind, then the networks kind (a network is
deleted under the ports lock, so no port can be added to it meanwhile).
"""

import uuid as uuidlib

from appliance.kinds import ADMIN_PROJECT
from state import DuplicateKey

from . import ipam

NETWORKS = "network_networks"
PORTS = "network_ports"
NETWORK_UNIQUE = [("default_of",), ("bridge",)]
PORT_UNIQUE = [("network", "ipv4"), ("mac",), ("node",)]
HOLDS = "network_address_holds"
HOLD_UNIQUE = [("network", "ipv4")]
CIDR_LOCK = "network-cidrs"
DEFAULT_NAME = "default"
LAYOUT = ("cidr", "gateway", "dns", "dhcp_start", "dhcp_end")
# VXLAN ids: 24 bits; the first 4,095 are left to an operator's own VXLANs (and to
# VLAN-numbered ones) on the same underlay
FIRST_VNI, LAST_VNI = 4096, (1 << 24) - 1


class NetworkError(Exception):
    """A network or an address that cannot be had; the message says why."""


class CidrConflict(NetworkError):
    pass


class NotFoundError(NetworkError):
    pass


def networks(store):
    return store.collection(NETWORKS, unique=NETWORK_UNIQUE)


def ports(store):
    return store.collection(PORTS, unique=PORT_UNIQUE)


def holds(store):
    """Addresses recently released, per network: internal, not served by the API."""
    return store.collection(HOLDS, unique=HOLD_UNIQUE)


def bridge_name(network_uuid):
    """A Linux bridge name (at most 15 characters) of the network; unique in the store."""
    return "ap-" + network_uuid.replace("-", "")[:12]


def create(store, settings, record):
    """Insert a network: `record` holds project_id, name, description, and optionally
    uuid, cidr (None: allocated), routing and default. A default network that exists
    already is returned instead. Raises ValueError (a bad cidr) or CidrConflict."""
    with store.named_lock(CIDR_LOCK):
        if record.get("default"):
            existing = networks(store).by("default_of", record["project_id"])
            if existing:
                return dict(existing[0])
        return networks(store).insert(prepare(store, settings, record))


def prepare(store, settings, record):
    """The record to insert, with its cidr, layout, bridge and keys. The caller holds the
    cidr lock until the insert (else two creators could pick overlapping cidrs)."""
    record = dict(record)
    record["uuid"] = record.get("uuid") or str(uuidlib.uuid4())
    default = bool(record.get("default"))
    project = record["project_id"]
    taken = [n["cidr"] for n in networks(store).records()]
    cidr = record.get("cidr")
    if cidr is None:
        cidr = _allocate_cidr(settings, project, default, taken)
    else:
        ipam.parse_cidr(cidr)
        _check_free(settings, cidr, taken)
    net_layout = ipam.layout(cidr)
    record.update({key: net_layout[key] for key in LAYOUT})
    record.update({
        "default": default, "default_of": project if default else record["uuid"],
        "bridge": bridge_name(record["uuid"]), "vni": free_vni(store),
        "status": "NEW", "status_reason": None})
    if record.get("routing") is None:
        record["routing"] = settings["network_routing"]
    return record


def free_vni(store):
    """The lowest VXLAN id no network holds. The caller holds the cidr lock until the
    insert or update."""
    taken = {n.get("vni") for n in networks(store).records()}
    vni = FIRST_VNI
    while vni in taken:
        vni += 1
    if vni > LAST_VNI:
        raise CidrConflict("no free VXLAN id left: delete a network")
    return vni


def ensure_vni(store, network):
    """The network record with a `vni`: one made before VXLAN ids were given gets the
    lowest free one now (under the cidr lock, compare and set)."""
    if network.get("vni") is not None:
        return network
    coll = networks(store)
    with store.named_lock(CIDR_LOCK):
        current = coll.get(network["uuid"])
        if current is None or current.get("vni") is not None:
            return current
        coll.update_many({current["uuid"]: (current["revision"], {"vni": free_vni(store)})})
        return coll.get(network["uuid"])


def _allocate_cidr(settings, project, default, taken):
    if default and project == ADMIN_PROJECT:
        cidr = settings["platform_network"]
        _check_free(settings, cidr, taken, platform=True)
        return cidr
    pool = settings["project_networks"]
    cidr = ipam.project_cidr(pool, settings["project_network_prefix"], taken)
    if cidr is None:
        raise CidrConflict(f"no free /{settings['project_network_prefix']} left in "
                           f"project_networks {pool}: give a cidr, or delete a network")
    return cidr


def _check_free(settings, cidr, taken, platform=False):
    if not platform and ipam.overlapping(cidr, [settings["platform_network"]]):
        raise CidrConflict(f"cidr {cidr} overlaps {settings['platform_network']}, kept for "
                           "the platform network (the admin project's default network)")
    other = ipam.overlapping(cidr, taken)
    if other is not None:
        raise CidrConflict(f"cidr {cidr} overlaps {other}, the cidr of another network: "
                           "networks may not overlap, since they all meet on the hypervisor")


def default_of_project(store, settings, project_id):
    """The project's default network, created on first use."""
    found = networks(store).by("default_of", project_id)
    if found:
        return dict(found[0])
    try:
        return create(store, settings, {"project_id": project_id, "name": DEFAULT_NAME,
                                        "description": "the project's default network",
                                        "default": True})
    except DuplicateKey as e:
        # every creator takes the cidr lock, so this is a second line of defence
        if e.fields != ("default_of",):
            raise
        return dict(networks(store).by("default_of", project_id)[0])
