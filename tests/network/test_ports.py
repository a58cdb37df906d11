"""Ports: allocate / release / default_network, the projects' default networks, and IPAM
with 6 concurrent creating processes on one store."""

import ipaddress
import multiprocessing
import uuid

import pytest

from appliance.network import ipam, networks, ports
from state import Store
from tests.network.conftest import settings_for

ADMIN = networks.ADMIN_PROJECT
WORKERS = 6
PER_WORKER = 50


def node(project=ADMIN, network=None):
    return {"uuid": str(uuid.uuid4()), "project_id": project, "network": network}


def test_first_port_makes_the_admin_default_network_on_the_platform_cidr(store, settings):
    first = ports.allocate(store, settings, node())
    network = networks.networks(store).get(first["network"])
    assert network["cidr"] == "10.20.0.0/22" and network["default"] is True
    assert network["routing"] == "isolated" and network["status"] == "NEW"
    assert (first["ipv4"], first["mask"], first["status"]) == ("10.20.0.20", "255.255.252.0",
                                                              "NEW")
    assert first["mac"].startswith("52:54:00:") and len(first["mac"]) == 17
    assert ports.default_network(first, network) == {
        "network": network["uuid"], "subnet": network["uuid"], "port": first["uuid"],
        "ipv4": "10.20.0.20", "mask": "255.255.252.0", "mac": first["mac"],
        "gateway": "10.20.0.1", "dns": "10.20.0.2"}


def test_allocate_is_idempotent_per_node(store, settings):
    n = node()
    assert ports.allocate(store, settings, n) == ports.allocate(store, settings, n)
    assert len(ports.ports(store).records()) == 1


def test_each_project_gets_its_own_default_network_from_the_pool(store, settings):
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    pa = ports.allocate(store, settings, node(a))
    pb = ports.allocate(store, settings, node(b))
    pa2 = ports.allocate(store, settings, node(a))
    nets = networks.networks(store)
    assert pa["network"] == pa2["network"] != pb["network"]
    assert {nets.get(pa["network"])["cidr"], nets.get(pb["network"])["cidr"]} == {
        "10.32.0.0/24", "10.32.1.0/24"}
    assert (pa["ipv4"], pa2["ipv4"], pb["ipv4"]) == ("10.32.0.20", "10.32.0.21", "10.32.1.20")
    assert pb["project_id"] == b
    assert nets.get(pa["network"])["bridge"] != nets.get(pb["network"])["bridge"]


def test_a_released_address_is_held_for_a_lease_then_given_again(store, settings):
    """A released address waits HOLD_SECONDS (the network's dnsmasq keeps the departed
    MAC's lease for an hour and would refuse the address to a new MAC: the new node would
    come up on another address than IPAM's) while fresh ones remain."""
    made = [ports.allocate(store, settings, node()) for _ in range(3)]
    assert [p["ipv4"] for p in made] == ["10.20.0.20", "10.20.0.21", "10.20.0.22"]
    assert ports.release(store, made[1]["node"])["uuid"] == made[1]["uuid"]
    assert ports.release(store, made[1]["node"]) is None
    assert ports.allocate(store, settings, node())["ipv4"] == "10.20.0.23"
    # once the hold is over, the lowest free address again
    hold = networks.holds(store).find_one(ipv4="10.20.0.21")
    networks.holds(store).update(hold["uuid"], {
        "released_at": hold["released_at"] - ports.HOLD_SECONDS})
    assert ports.allocate(store, settings, node())["ipv4"] == "10.20.0.21"
    assert networks.holds(store).find_one(ipv4="10.20.0.21") is None


def test_with_no_fresh_address_the_one_released_longest_ago_is_given(store, settings):
    project = str(uuid.uuid4())
    net = networks.create(store, settings, {"project_id": project, "name": "tiny",
                                            "cidr": "10.41.0.0/29"})
    made = [ports.allocate(store, settings, node(project, network=net["uuid"]))
            for _ in range(4)]
    assert [p["ipv4"] for p in made] == ["10.41.0.3", "10.41.0.4", "10.41.0.5", "10.41.0.6"]
    ports.release(store, made[2]["node"])
    ports.release(store, made[0]["node"])
    assert ports.allocate(store, settings, node(project, network=net["uuid"]))["ipv4"] == \
        "10.41.0.5"
    assert ports.allocate(store, settings, node(project, network=net["uuid"]))["ipv4"] == \
        "10.41.0.3"
    with pytest.raises(ports.AddressesExhausted):
        ports.allocate(store, settings, node(project, network=net["uuid"]))


def test_a_named_network_of_the_project_is_used(store, settings):
    project = str(uuid.uuid4())
    net = networks.create(store, settings, {"project_id": project, "name": "small",
                                            "cidr": "10.40.0.0/29"})
    assert net["dhcp_start"] == "10.40.0.3" and net["dhcp_end"] == "10.40.0.6"
    got = [ports.allocate(store, settings, node(project, net["uuid"]))["ipv4"]
           for _ in range(4)]
    assert got == ["10.40.0.3", "10.40.0.4", "10.40.0.5", "10.40.0.6"]


def test_exhaustion_is_a_clear_error_and_writes_nothing(store, settings):
    project = str(uuid.uuid4())
    net = networks.create(store, settings, {"project_id": project, "name": "tiny",
                                            "cidr": "10.40.0.8/29"})
    for _ in range(4):
        ports.allocate(store, settings, node(project, net["uuid"]))
    with pytest.raises(ports.AddressesExhausted) as caught:
        ports.allocate(store, settings, node(project, net["uuid"]))
    assert str(caught.value) == ("network tiny (10.40.0.8/29) has no free address: all 4 "
                                 "from 10.40.0.11 to 10.40.0.14 are taken")
    assert len(ports.ports(store).records()) == 4


def test_a_network_of_another_project_or_none_is_not_found(store, settings):
    net = networks.create(store, settings, {"project_id": str(uuid.uuid4()), "name": "x"})
    for wanted in (net["uuid"], str(uuid.uuid4())):
        with pytest.raises(networks.NotFoundError, match=f"network {wanted} not found"):
            ports.allocate(store, settings, node(str(uuid.uuid4()), wanted))
    assert ports.ports(store).records() == []


def test_no_free_project_cidr_is_a_clear_error(store, tmp_path):
    settings = settings_for(store.directory, project_networks="10.32.0.0/23")
    for _ in range(2):
        ports.allocate(store, settings, node(str(uuid.uuid4())))
    with pytest.raises(networks.CidrConflict, match="no free /24 left in project_networks "
                                                    "10.32.0.0/23"):
        ports.allocate(store, settings, node(str(uuid.uuid4())))


def test_a_mac_in_use_is_drawn_again(store, settings, monkeypatch):
    first = ports.allocate(store, settings, node())
    draws = iter([first["mac"], first["mac"], "52:54:00:12:34:56"])
    monkeypatch.setattr(ports, "random_mac", lambda: next(draws))
    assert ports.allocate(store, settings, node())["mac"] == "52:54:00:12:34:56"
    assert len(ports.ports(store).records()) == 2


def test_the_store_refuses_a_second_port_on_an_address_or_node(store, settings):
    # what guards a writer that would skip allocate's lock
    made = ports.allocate(store, settings, node())
    copy = {k: v for k, v in made.items() if k not in ("uuid", "revision")}
    for changed in ({"node": str(uuid.uuid4()), "mac": "52:54:00:00:00:01"},
                    {"ipv4": "10.20.0.99", "mac": "52:54:00:00:00:02"},
                    {"node": str(uuid.uuid4()), "ipv4": "10.20.0.98"}):
        with pytest.raises(networks.DuplicateKey):
            ports.ports(store).insert({**copy, **changed})
    assert len(ports.ports(store).records()) == 1


# ---- 6 processes on one store --------------------------------------------------------

def _allocate_many(directory, count, start, results):
    """One creating process: waits for the others, then allocates `count` ports."""
    store = Store(directory)
    settings = settings_for(directory)
    start.wait()
    made = [ports.allocate(store, settings, node())["uuid"] for _ in range(count)]
    results.put(made)
    store.close()


def test_six_processes_never_share_an_address_or_mac(tmp_path):
    directory = str(tmp_path / "state")
    Store(directory).close()
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_allocate_many, args=(directory, PER_WORKER, start, results))
               for _ in range(WORKERS)]
    for w in workers:
        w.start()
    start.set()
    made = [results.get(timeout=600) for _ in workers]
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    store = Store(directory)
    try:
        all_ports = ports.ports(store).records()
        nets = networks.networks(store).records()
    finally:
        store.close()
    total = WORKERS * PER_WORKER
    assert sorted(u for batch in made for u in batch) == sorted(p["uuid"] for p in all_ports)
    # one default network, though all six made it at once
    assert len(nets) == 1 and nets[0]["cidr"] == "10.20.0.0/22"
    addresses = [p["ipv4"] for p in all_ports]
    assert len(set(addresses)) == total
    assert len({p["mac"] for p in all_ports}) == total
    assert len({p["node"] for p in all_ports}) == total
    # nothing released, so lowest-first leaves no hole: exactly the first 300 leases
    first = int(ipaddress.IPv4Address(ipam.layout("10.20.0.0/22")["dhcp_start"]))
    assert sorted(int(ipaddress.IPv4Address(a)) for a in addresses) == list(
        range(first, first + total))
