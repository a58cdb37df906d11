"""The checks a node or a set passes before the API writes it (docs/compute.md): its disks,
placement policies and network, a PUT of a set member's template, a HW node's `address` and
the `default_network` that follows from it. Each raises the API's 4xx error and changes
nothing; resources.py calls them from its hooks, and keeps the declaration and the HTTP
mapping.

What the compute daemon follows too (statuses, a new node, a PUT's IN_PROGRESS) is in
lifecycle.py, which imports nothing of the API framework; this module does (its errors), so
the daemon never imports it.
"""

import ipaddress
import re

from appliance.api.errors import BadRequest, Conflict, Forbidden
from appliance.kinds import (ADMIN_PROJECT, COMPUTE_NODES, NETWORK_NETWORKS,
                             NETWORK_PORTS)
from appliance.tenancy import addresses, is_platform

from . import disks
from .lifecycle import SET_TEMPLATE, built_by_daemon, redone

POLICIES, ARTIFACTS = "compute_placement_policies", "repo_artifacts"
# an IPv4 address as typed, nothing around it (ipaddress alone is not the check: the text
# is stored and shown as given)
IPV4_TEXT = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3}){3}\Z")


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


def artifacts(store, call, project_id):
    return artifact_lookup(store.collection(ARTIFACTS), call, project_id)


def reach(settings, call, project_id):
    """The caller's address rule for images of `project_id` (tenancy/addresses)."""
    return addresses.for_caller(call.store, settings, call.principal, project_id)


def check_image(store, settings, call, where, image, project_id):
    """An image URL (disks.check_image) as the caller may give it for `project_id`."""
    disks.check_image(where, image, is_platform(call.principal),
                      artifacts(store, call, project_id),
                      reach(settings, call, project_id))


def check_policies(store, project_id, uuids):
    if len(set(uuids)) != len(uuids):
        raise BadRequest("placement_policies: must not repeat a policy")
    found = store.collection(POLICIES)
    for uuid in uuids:
        policy = found.get(uuid)
        if policy is None or policy.get("project_id") != project_id:
            raise BadRequest(f"placement_policies: no placement policy {uuid} in "
                             f"project {project_id}")


def check_network(store, project_id, uuid):
    if uuid is None:
        return
    network = store.collection(NETWORK_NETWORKS).get(uuid)
    if network is None or network.get("project_id") != project_id:
        raise BadRequest(f"network: no network {uuid} in project {project_id}")


def check_disk_spec(store, settings, call, record, node_type, project_id, current=None):
    spec = record.get("disk_spec")
    if node_type == "HW":
        if spec is not None:
            raise BadRequest("disk_spec: a HW node gets no disks (leave it null)")
        return None
    if spec is None:
        raise BadRequest("disk_spec: required for node_type VM")
    spec = disks.normalize(spec, is_platform(call.principal),
                           artifacts(store, call, project_id),
                           reach(settings, call, project_id))
    if current is not None:
        disks.check_change(current, spec)
    return spec


def check_machine(store, settings, call, record):
    """A new node or set: its disks, policies and network checked (400/403)."""
    project = record["project_id"]
    record["disk_spec"] = check_disk_spec(store, settings, call, record,
                                          record["node_type"], project)
    check_policies(store, project, record["placement_policies"])
    check_network(store, project, record.get("network"))


def machine_changes(store, settings, call, current, changes):
    """A PUT of a node or a set: its disks and policies checked, and IN_PROGRESS
    again (the reference's "PUT resets status")."""
    if "disk_spec" in changes:
        changes["disk_spec"] = check_disk_spec(store, settings, call, changes,
                                               current["node_type"], current["project_id"],
                                               current.get("disk_spec"))
    if "placement_policies" in changes:
        check_policies(store, current["project_id"], changes["placement_policies"])
    return redone(changes)


def check_member_change(current, changes):
    """A set's member keeps the set's template: a PUT that changes it is a 409."""
    if current.get("node_set") and any(f in changes and changes[f] != current.get(f)
                                       for f in SET_TEMPLATE):
        raise Conflict(f"node {current['uuid']} is a member of set "
                       f"{current['node_set']}: change {', '.join(SET_TEMPLATE)} on the set")


def check_default_network(body, current=None):
    """`default_network` is read-only: a body may repeat the stored one, or send {}."""
    given = body.get("default_network")
    if given not in (None, {}) and (current is None or given != current.get(
            "default_network")):
        raise Forbidden("default_network is read-only: a VM node's comes from its "
                        "network (IPAM); a HW node's follows `address`: set that")


def node_update(store, settings, call, current, changes):
    """A PUT of a node: the set's template kept, a new `address` checked, and the status
    IN_PROGRESS again, but for a HW node (no daemon builds it)."""
    check_member_change(current, changes)
    if "address" in changes and changes["address"] != current.get("address"):
        given = changes["address"]
        if given is None:
            shown = current.get("default_network") or {}
            if shown.get("ipv4") == current.get("address"):
                changes["default_network"] = {}
        else:
            changes["address"] = checked_address(store, settings, call, current, given)
            changes["default_network"] = hw_default_network(store, current,
                                                            changes["address"])
    changes = machine_changes(store, settings, call, current, changes)
    if not built_by_daemon(current):
        # nothing moves a HW node's status on (no daemon builds it): a PUT leaves it
        changes.pop("status", None)
        changes.pop("status_reason", None)
    return changes


def checked_address(store, settings, call, node, given):
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
    why = addresses.for_caller(call.store, settings, call.principal,
                               node["project_id"]).refusal(address)
    if why is not None:
        raise BadRequest(f"address: {why}")
    check_address_free(store, node, address)
    return address


def check_address_free(store, node, address):
    """One address one node: no port and no other node's default_network holds it (409)."""
    for port in store.collection(NETWORK_PORTS).by("ipv4", address):
        if port.get("node") != node["uuid"]:
            raise Conflict(f"address: {address} is the address of node "
                           f"{port.get('node')} on its network")
    for other in store.collection(COMPUTE_NODES).records():
        if other["uuid"] != node["uuid"] and \
                (other.get("default_network") or {}).get("ipv4") == address:
            whose = f"node {other.get('name') or other['uuid']}" if \
                other.get("project_id") == node["project_id"] else "another node"
            raise Conflict(f"address: {address} is already the address of {whose}")


def hw_default_network(store, node, address):
    """`default_network` of a HW node at `address`: the project's network holding it
    (its mask, gateway and DNS), or nothing more than the address."""
    ip = ipaddress.IPv4Address(address)
    for network in store.collection(NETWORK_NETWORKS).by("project_id", node["project_id"]):
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
