"""The underlay: the hypervisors' own addresses that carry project networks between them
(VXLAN, docs/network.md "Networks across hypervisors") and the nodes' memory and disks
when a node moves (compute's migrate). The rule for every field that names one (a
hypervisor's `driver_spec.underlay_address` and `driver_spec.migration_address`; a
network's `vni` and `home_hypervisor` are read-only fields the platform gives).

Whoever sets an underlay address decides where every project's broadcast frames are sent
(each hypervisor floods a network's frames to its peers' underlay addresses), and a VXLAN
packet that reaches a hypervisor's port is put on the bridge of its VXLAN id. So:
- only a platform caller sets one (a hypervisor is the platform's record anyway; the rule
  holds even if a project were ever granted the hypervisor policy);
- it is a unicast IPv4 address of a host, never loopback, link-local, multicast,
  unspecified or broadcast;
- it lies inside no network of the appliance (any project's or the platform's): an
  address there is a node's, or could become one, and that node would receive every
  network's flooded frames, and could send frames into any network by VXLAN id; a
  migration address there would send a moving node's memory and disks to that node.
"""

import ipaddress

from appliance.kinds import NETWORK_NETWORKS

from . import is_platform

FIELD = "driver_spec.underlay_address"


def refusal(store, principal, text, field=FIELD):
    """None when `principal` may set the underlay address `text` (of `field`), else
    (status, message): 403 for a caller who is not the platform, 400 for an address that
    cannot be one."""
    if not is_platform(principal):
        return 403, f"{field}: only the platform sets the hypervisors' underlay addresses"
    try:
        address = ipaddress.IPv4Address(text) if isinstance(text, str) else None
    except ValueError:
        address = None
    if address is None:
        return 400, f"{field}: {text!r} is not an IPv4 address like 192.0.2.10"
    if (address.is_loopback or address.is_link_local or address.is_multicast
            or address.is_unspecified or address == ipaddress.IPv4Address("255.255.255.255")):
        return 400, (f"{field}: {address} is a loopback, link-local, multicast or "
                     "unspecified address: give the hypervisor's address on the network "
                     "that joins the hypervisors")
    for network in store.collection(NETWORK_NETWORKS).records():
        if address in ipaddress.IPv4Network(network["cidr"]):
            return 400, (f"{field}: {address} lies inside {network['cidr']}, a network of "
                         "the appliance's nodes: the underlay must be the hypervisors' own "
                         "network, which no node is on")
    return None
