"""IPAM, pure: the layout of a network, the lowest free address, a project network's cidr.

No I/O and no store: `ports.py` feeds it the addresses in use and the cidrs taken, and the
store's unique keys make its answers safe between concurrent creators (docs/network.md).
"""

import ipaddress

# RFC 1918: a network's host addresses sit on the hypervisor's bridges, never on the
# uplink's public side
PRIVATE = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12",
                                                   "192.168.0.0/16"))
LONGEST_PREFIX = 29         # .0 network, .1 gateway, .2 DNS, four leases, broadcast
LEASE_OFFSET = 20           # the reference's first lease (network + 20)
SMALL_LEASE_OFFSET = 3      # under a /27, .20 would leave too few leases (or none)
ROUTINGS = ("isolated", "nat")


def parse_cidr(text):
    """The IPv4Network of a network's cidr, or ValueError with the rule broken."""
    if not isinstance(text, str):
        raise ValueError("cidr: must be a string like 10.32.0.0/24")
    try:
        net = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        raise ValueError(f"cidr: {text!r} is not an IPv4 network like 10.32.0.0/24") from None
    if "/" not in text:
        raise ValueError(f"cidr: {text!r} has no prefix length; like 10.32.0.0/24")
    if str(net) != text:
        raise ValueError(f"cidr: {text} is not written as a network; the network is {net}")
    if not any(net.subnet_of(p) for p in PRIVATE):
        raise ValueError(f"cidr: {text} is not a private network (inside 10.0.0.0/8, "
                         "172.16.0.0/12 or 192.168.0.0/16)")
    if net.prefixlen > LONGEST_PREFIX:
        raise ValueError(f"cidr: {text} is too small: at least /{LONGEST_PREFIX} (network, "
                         "gateway, DNS, four leases and broadcast)")
    return net


def layout(cidr):
    """The addresses of a network: gateway .1, DNS .2, leases from .20 (.3 under a /27) to
    the last address before the broadcast."""
    net = parse_cidr(cidr)
    base = int(net.network_address)
    offset = LEASE_OFFSET if net.num_addresses >= 32 else SMALL_LEASE_OFFSET
    address = ipaddress.IPv4Address
    return {"cidr": str(net), "mask": str(net.netmask), "prefix": net.prefixlen,
            "gateway": str(address(base + 1)), "dns": str(address(base + 2)),
            "dhcp_start": str(address(base + offset)),
            "dhcp_end": str(address(int(net.broadcast_address) - 1))}


def lease_count(net_layout):
    return (int(ipaddress.IPv4Address(net_layout["dhcp_end"]))
            - int(ipaddress.IPv4Address(net_layout["dhcp_start"])) + 1)


def lowest_free(net_layout, used):
    """The lowest lease address of the layout not in `used` (addresses as strings, in the
    dotted form this module writes), or None when every one is taken. Addresses outside
    the range in `used` are ignored."""
    start = int(ipaddress.IPv4Address(net_layout["dhcp_start"]))
    end = int(ipaddress.IPv4Address(net_layout["dhcp_end"]))
    # compared as strings: parsing every address in use would cost more than the rest of
    # an allocation (20 ms at 1,000 ports)
    taken = set(used)
    for candidate in range(start, end + 1):
        dotted = _dotted(candidate)
        if dotted not in taken:
            return dotted
    return None


def _dotted(number):
    return f"{number >> 24}.{(number >> 16) & 255}.{(number >> 8) & 255}.{number & 255}"


def overlapping(cidr, taken):
    """The first of `taken` (cidrs) that shares an address with `cidr`, else None."""
    net = ipaddress.IPv4Network(cidr)
    for other in taken:
        if net.overlaps(ipaddress.IPv4Network(other)):
            return other
    return None


def project_cidr(pool, prefix, taken):
    """The lowest `/prefix` of `pool` that overlaps none of `taken` (cidrs), or None.
    One walk over the taken spans in address order: each span that meets the candidate
    pushes it past that span's end, aligned to the prefix."""
    pool = ipaddress.IPv4Network(pool)
    size = 1 << (32 - prefix)
    spans = sorted((int(n.network_address), int(n.broadcast_address))
                   for n in map(ipaddress.IPv4Network, taken))
    start = int(pool.network_address)
    for low, high in spans:
        if high < start:
            continue
        if low > start + size - 1:
            break
        start = -(-(high + 1) // size) * size
    if start + size - 1 > int(pool.broadcast_address):
        return None
    return str(ipaddress.IPv4Network((start, prefix)))


def check_settings(settings):
    """ValueError naming the setting when the network settings cannot work together."""
    nets = {}
    for key in ("platform_network", "project_networks"):
        try:
            nets[key] = parse_cidr(settings[key])
        except ValueError as e:
            raise ValueError(f"{key}: {str(e).removeprefix('cidr: ')}") from None
    prefix = settings["project_network_prefix"]
    if not nets["project_networks"].prefixlen <= prefix <= LONGEST_PREFIX:
        raise ValueError(f"project_network_prefix: {prefix} must be between "
                         f"{nets['project_networks'].prefixlen} (the pool's) and "
                         f"{LONGEST_PREFIX}")
    if nets["platform_network"].overlaps(nets["project_networks"]):
        raise ValueError(f"platform_network {nets['platform_network']} overlaps "
                         f"project_networks {nets['project_networks']}")
    if settings["network_routing"] not in ROUTINGS:
        raise ValueError(f"network_routing: {settings['network_routing']!r} is not one of "
                         f"{', '.join(ROUTINGS)}")
