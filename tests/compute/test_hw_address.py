"""A HW node's `address` (docs/compute.md, "HW nodes"; docs/security.md, "Addresses a
project may reach"): the operator gives a bare-metal machine the address its network gave
it; a project's owner only an address its project may reach (the one rule of
appliance/tenancy/addresses.py), a platform caller any. default_network shows it, IPAM
leases it to no VM, and every refusal is a clean 4xx that changes nothing."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.network import ports

from .conftest import ADMIN_PROJECT, N, Member, created, node_body, refused

NETWORKS = "/v1/network/networks"


def hw_body(project, **fields):
    return node_body(project_id=project, node_type="HW", disk_spec=None, **fields)


def host(network, last):
    return network["cidr"].rsplit(".", 1)[0] + f".{last}"


@pytest.fixture(scope="module")
def tenants(server, admin):
    """Two projects, each with a network of its own."""
    mine, theirs = Member(server, admin), Member(server, admin)
    for m in (mine, theirs):
        m.network = created(admin.post(NETWORKS, {"name": "net", "project_id": m.project}))
    return mine, theirs


def unchanged(server, uuid, request, status):
    """`request` refused with `status`, the node's record as it was."""
    before = server.store.collection("compute_nodes").get(uuid)
    message = refused(request(), status)
    assert server.store.collection("compute_nodes").get(uuid) == before
    return message


def test_an_owner_sets_an_address_of_its_own_network(server, tenants):
    mine, _ = tenants
    node = created(mine.client.post(N, hw_body(mine.project)))
    assert (node["address"], node["default_network"]) == (None, {})
    address = host(mine.network, 9)
    put = mine.client.put(f"{N}/{node['uuid']}", {"address": address})
    assert put.status == 200, put.json
    shown = put.json
    assert shown["address"] == address
    assert shown["default_network"] == {
        "network": mine.network["uuid"], "subnet": mine.network["uuid"], "port": None,
        "ipv4": address, "mask": "255.255.255.0" if mine.network["cidr"].endswith("/24")
        else shown["default_network"]["mask"], "mac": None,
        "gateway": mine.network["gateway"], "dns": mine.network["dns"]}
    # a HW node's status is nobody's to move on: the PUT leaves it
    assert shown["status"] == node["status"]
    # given on create too
    other = created(mine.client.post(N, hw_body(mine.project, address=host(mine.network, 10))))
    assert other["default_network"]["ipv4"] == host(mine.network, 10)
    # null takes it away
    gone = mine.client.put(f"{N}/{node['uuid']}", {"address": None}).json
    assert (gone["address"], gone["default_network"]) == (None, {})


@pytest.mark.parametrize("which,why", [
    ("loopback", "loopback"), ("theirs", "another project's network"),
    ("outside", "outside every network"), ("gateway", "the appliance's own address"),
    ("network_address", "not a host address"), ("appliance", "platform node"),
])
def test_an_owner_is_refused_what_its_project_may_not_reach(server, admin, tenants, which,
                                                            why):
    mine, theirs = tenants
    admin_address = "192.0.2.77"        # a platform node's, set by the admin
    platform_node = created(admin.post(N, hw_body(ADMIN_PROJECT, address=admin_address)))
    given = {"loopback": "127.0.0.1", "theirs": host(theirs.network, 9),
             "outside": "198.51.100.7", "gateway": mine.network["gateway"],
             "network_address": host(mine.network, 0), "appliance": admin_address}[which]
    node = created(mine.client.post(N, hw_body(mine.project)))
    message = unchanged(server, node["uuid"], lambda: mine.client.put(
        f"{N}/{node['uuid']}", {"address": given}), 400)
    assert "address" in message and why in message, message
    before = len(mine.client.get(N).json)
    refused(mine.client.post(N, hw_body(mine.project, address=given)), 400)
    assert len(mine.client.get(N).json) == before
    server.store.collection("compute_nodes").delete(platform_node["uuid"])


def test_an_outside_network_the_admin_allows_is_the_owners_too(server, tenants):
    mine, _ = tenants
    node = created(mine.client.post(N, hw_body(mine.project)))
    server.settings["allowed_outside_networks"] = "198.51.100.0/24"
    try:
        put = mine.client.put(f"{N}/{node['uuid']}", {"address": "198.51.100.7"})
        assert put.status == 200, put.json
        assert put.json["default_network"]["network"] is None
        assert put.json["default_network"]["ipv4"] == "198.51.100.7"
    finally:
        server.settings["allowed_outside_networks"] = ""
        mine.client.put(f"{N}/{node['uuid']}", {"address": None})


def test_a_platform_caller_sets_any_address(server, admin, tenants):
    mine, _ = tenants
    own = created(admin.post(N, hw_body(ADMIN_PROJECT, address="127.0.0.1")))
    assert own["default_network"]["ipv4"] == "127.0.0.1"
    theirs = created(mine.client.post(N, hw_body(mine.project)))
    put = admin.put(f"{N}/{theirs['uuid']}", {"address": "198.51.100.8"})
    assert put.status == 200 and put.json["address"] == "198.51.100.8"
    admin.delete(f"{N}/{own['uuid']}")
    admin.delete(f"{N}/{theirs['uuid']}")


@pytest.mark.parametrize("bad", ["10.0.0.5\n", " 10.0.0.5", "10.0.0.256", "10.0.0.5/24",
                                 "010.0.0.5", "::1", "10.0.0", "", 5, ["10.0.0.5"]])
def test_what_is_not_an_ipv4_address_is_a_400(server, admin, bad):
    node = created(admin.post(N, hw_body(ADMIN_PROJECT)))
    unchanged(server, node["uuid"], lambda: admin.put(f"{N}/{node['uuid']}",
                                                      {"address": bad}), 400)
    admin.delete(f"{N}/{node['uuid']}")


def test_a_vm_takes_no_address(server, admin):
    vm = created(admin.post(N, node_body()))
    message = unchanged(server, vm["uuid"], lambda: admin.put(f"{N}/{vm['uuid']}", {
        "address": "192.0.2.5"}), 400)
    assert "IPAM" in message
    assert "IPAM" in refused(admin.post(N, node_body(address="192.0.2.5")), 400)


def test_one_address_one_node_and_ipam_leases_it_to_no_vm(server, admin, tenants):
    mine, _ = tenants
    layout_first = host(mine.network, 20)          # the network's first lease (.20)
    a = created(mine.client.post(N, hw_body(mine.project, address=layout_first)))
    b = created(mine.client.post(N, hw_body(mine.project)))
    message = unchanged(server, b["uuid"], lambda: mine.client.put(
        f"{N}/{b['uuid']}", {"address": layout_first}), 409)
    assert a["name"] in message
    vm = created(mine.client.post(N, node_body(project_id=mine.project,
                                               network=mine.network["uuid"])))
    port = ports.allocate(server.store, server.settings,
                          server.store.collection("compute_nodes").get(vm["uuid"]))
    assert port["ipv4"] != layout_first
    # and the address a VM holds is not a HW node's
    message = unchanged(server, b["uuid"], lambda: mine.client.put(
        f"{N}/{b['uuid']}", {"address": port["ipv4"]}), 409)
    assert vm["uuid"] in message


def test_concurrent_claims_of_one_address_give_it_to_one_node(server, tenants):
    mine, _ = tenants
    nodes = [created(mine.client.post(N, hw_body(mine.project))) for _ in range(6)]
    address = host(mine.network, 33)
    with ThreadPoolExecutor(len(nodes)) as pool:
        answers = list(pool.map(lambda n: mine.client.put(f"{N}/{n['uuid']}",
                                                          {"address": address}), nodes))
    assert sorted(a.status for a in answers) == [200] + [409] * (len(nodes) - 1)
    holders = [n for n in server.store.collection("compute_nodes").records()
               if (n.get("default_network") or {}).get("ipv4") == address]
    assert len(holders) == 1
