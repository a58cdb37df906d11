"""Which addresses a project may reach: the one rule (docs/security.md, "Addresses a
project may reach, and the guarded fetcher").

The appliance sits on every project's bridge (as gateway .1 and DNS .2), listens on its
own loopback, and runs every daemon that fetches or proxies for a project. So an address
a project names (an LB pool's host, the host of an image, repository or archive URL) is
reached *from the appliance's side* of every network: unchecked, it would let a project
reach the plain-HTTP API on loopback, another tenant's nodes, or the platform's network.

For a project, an address is allowed only when it is a host of one of the project's own
networks (not the appliance's .1/.2 there), or lies in an outside network an admin
listed in the setting `allowed_outside_networks`. Never, whatever the setting: the
unspecified and multicast addresses, the appliance's addresses on any network, another
project's network, the platform's network. Platform callers reach anything.

`Reach` is the rule's data for one caller, so that a daemon without the store (the node
agent) can apply the same rule from what the platform sent it (`as_dict`/`from_dict`).
Stdlib only (appliance/kinds.py is too): the node agent imports this module.
"""

import ipaddress
import threading
import time

from appliance.kinds import COMPUTE_NODES, NETWORK_NETWORKS

SETTING = "allowed_outside_networks"
# the kinds read here through the store (network/networks.py and compute write them)
NETWORKS, NODES = NETWORK_NETWORKS, COMPUTE_NODES
HOST_ADDRESSES_TTL = 10.0          # seconds a read of the host's own addresses is reused

_ALWAYS = (
    (ipaddress.ip_network("0.0.0.0/8"), "the unspecified network 0.0.0.0/8"),
    (ipaddress.ip_network("::/128"), "the unspecified address"),
    (ipaddress.ip_network("224.0.0.0/4"), "a multicast address"),
    (ipaddress.ip_network("ff00::/8"), "a multicast address"),
    (ipaddress.ip_network("255.255.255.255/32"), "the broadcast address"),
)
_SPECIAL = (
    (ipaddress.ip_network("127.0.0.0/8"), "a loopback address (the appliance itself)"),
    (ipaddress.ip_network("::1/128"), "a loopback address (the appliance itself)"),
    (ipaddress.ip_network("169.254.0.0/16"), "a link-local address"),
    (ipaddress.ip_network("fe80::/10"), "a link-local address"),
)


def parse_address(text):
    """An ip_address from text (IPv4, IPv6 with or without brackets, an IPv4-mapped IPv6
    taken as its IPv4), or None when it is not an address literal."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0] if ":" in text else text)
    except ValueError:
        return None
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_networks(value, where=SETTING):
    """[ip_network] from a list of CIDRs or a comma-separated string; ValueError naming
    the bad entry."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{where}: {item!r} is not a network like 192.0.2.0/24") \
                from None
    return out


class Reach:
    """What one caller may reach. `own`: the project's networks [(network, name)];
    `denied`: [(network, reason)] refused before anything else (the appliance's .1/.2 on
    every network, other projects' and the platform's networks); `outside`: the networks
    the admin setting allows."""

    def __init__(self, project_id=None, platform=False, own=(), denied=(), outside=()):
        self.project_id = project_id
        self.platform = platform
        self.own = [(ipaddress.ip_network(n), name) for n, name in own]
        self.denied = [(ipaddress.ip_network(n), why) for n, why in denied]
        self.outside = [ipaddress.ip_network(n) for n in outside]

    def refusal(self, address, host_addresses=None):
        """None when the caller may reach `address` (text or ip_address), else the reason
        (for an error message). `host_addresses`: the addresses of the host the
        connection leaves from (default: this host's, read from /proc)."""
        if self.platform:
            return None
        ip = address if isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address)) \
            else parse_address(address)
        if ip is None:
            return f"{address!r} is not an IP address"
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        who = f"project {self.project_id}"
        for net, why in _ALWAYS:
            if ip in net:
                return f"{ip} is {why}"
        for net, why in self.denied:
            if ip.version == net.version and ip in net:
                return f"{ip} is {why}: no project may reach it"
        for net, name in self.own:
            if ip.version == net.version and ip in net:
                if net.num_addresses > 2 and ip in (net.network_address,
                                                    net.broadcast_address):
                    return f"{ip} is not a host address of network {name} ({net})"
                return None
        if any(ip.version == net.version and ip in net for net in self.outside):
            return None
        for net, why in _SPECIAL:
            if ip in net:
                return f"{ip} is {why}, which {who} may not reach"
        if ip in (host_addresses if host_addresses is not None else host_addresses_now()):
            return f"{ip} is an address of the appliance's host, which {who} may not reach"
        return (f"{ip} is outside every network of {who}: use an address of one of the "
                f"project's networks, or ask an administrator to list its network in the "
                f"setting {SETTING}")

    def as_dict(self, relevant_only=True):
        """The rule's data for a daemon without the store. `relevant_only`: denied
        entries that meet neither an own nor an allowed outside network are left out (they
        are refused anyway, and naming them would tell a node other tenants' networks)."""
        allowed = [n for n, _ in self.own] + self.outside
        denied = [(n, why) for n, why in self.denied if not relevant_only or any(
            n.version == a.version and n.overlaps(a) for a in allowed)]
        return {"project_id": self.project_id, "platform": self.platform,
                "own": [[str(n), name] for n, name in self.own],
                "denied": [[str(n), why] for n, why in denied],
                "outside": [str(n) for n in self.outside]}

    @classmethod
    def from_dict(cls, data):
        """The Reach of `as_dict`; ValueError on anything else (a node must not guess)."""
        if not isinstance(data, dict):
            raise ValueError("reach: not a mapping")
        try:
            return cls(project_id=data.get("project_id"), platform=data.get("platform") is True,
                       own=[tuple(x) for x in data.get("own") or ()],
                       denied=[tuple(x) for x in data.get("denied") or ()],
                       outside=data.get("outside") or ())
        except (TypeError, ValueError) as e:
            raise ValueError(f"reach: {e}") from None


PLATFORM = Reach(platform=True)


def for_project(store, settings, project_id):
    """The Reach of a project (the platform's for the admin project), from the network
    records and the setting."""
    from appliance.kinds import ADMIN_PROJECT  # noqa: PLC0415
    from appliance.tenancy import is_platform_project  # noqa: PLC0415
    if is_platform_project(project_id):
        return PLATFORM
    own, denied = [], []
    platform_cidr = settings.get("platform_network")
    if platform_cidr:
        denied.append((platform_cidr, "in the platform's network"))
    for net in store.collection(NETWORKS).records():
        label = net.get("name") or net["uuid"]
        for key in ("gateway", "dns"):
            if net.get(key):
                denied.append((net[key] + "/32",
                               f"the appliance's own address on network {label}"
                               if net.get("project_id") == project_id else
                               "the appliance's own address on a network"))
        if not net.get("cidr"):
            continue
        if net.get("project_id") == project_id:
            own.append((net["cidr"], label))
        elif net.get("project_id") == ADMIN_PROJECT:
            denied.append((net["cidr"], "in the platform's network"))
        else:
            denied.append((net["cidr"], "in another project's network"))
    # the platform's nodes (the appliance's own node among them) are the platform's,
    # whatever network they sit on
    for node in store.collection(NODES).records():
        ipv4 = (node.get("default_network") or {}).get("ipv4")
        if ipv4 and node.get("project_id") == ADMIN_PROJECT and parse_address(ipv4):
            denied.append((ipv4 + "/32", "the address of a platform node (the "
                                          "appliance's own node among them)"))
    return Reach(project_id=project_id, own=own, denied=denied,
                 outside=parse_networks(settings.get(SETTING)))


def for_caller(store, settings, principal, project_id):
    """The Reach of an API caller acting on a record of `project_id`: a platform caller
    reaches anything, anyone else what the project may."""
    from appliance.tenancy import is_platform  # noqa: PLC0415
    if is_platform(principal):
        return PLATFORM
    return for_project(store, settings, project_id)


def refusal(store, settings, project_id, address, platform=False):
    """The one question: None when `address` may be reached for `project_id`, else the
    reason. `platform`: the caller is a platform caller (it reaches anything)."""
    if platform:
        return None
    return for_project(store, settings, project_id).refusal(address)


# ---- the host's own addresses -------------------------------------------------------------

_host_cache = {"at": None, "addresses": frozenset()}
_host_lock = threading.Lock()


def host_addresses_now():
    """The addresses of this host's interfaces (every namespace-local IPv4 marked LOCAL
    in /proc/net/fib_trie, every IPv6 in /proc/net/if_inet6), re-read every
    HOST_ADDRESSES_TTL seconds (an address may be added at any time)."""
    now = time.monotonic()
    with _host_lock:
        if _host_cache["at"] is not None and now - _host_cache["at"] < HOST_ADDRESSES_TTL:
            return _host_cache["addresses"]
    found = set(_read_fib_trie()) | set(_read_if_inet6())
    with _host_lock:
        _host_cache.update(at=now, addresses=frozenset(found))
    return _host_cache["addresses"]


def _read_fib_trie(path="/proc/net/fib_trie"):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out, last = [], None
    for line in lines:
        text = line.strip()
        if text.startswith("|--"):
            last = text[3:].strip()
        elif text.startswith("/32 host LOCAL") and last:
            address = parse_address(last)
            if address is not None:
                out.append(address)
    return out


def _read_if_inet6(path="/proc/net/if_inet6"):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if parts and len(parts[0]) == 32:
            try:
                out.append(ipaddress.IPv6Address(int(parts[0], 16)))
            except ValueError:
                continue
    return out
