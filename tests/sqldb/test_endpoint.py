"""The endpoint (appliance/sqldb/endpoint.py): the zone made, the A record following the
primary through a failover and gone with the instance, asked of the real DNS daemon
(`python -m daemons.dns`, as tests/dns start it) over UDP on loopback."""

import time

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest

from appliance.sqldb import endpoint
from appliance.sqldb.reconcile import Planner
from tests.apiserver import free_port
from tests.dns.test_server import DNSDaemon
from tests.waiting import eventually

from .planworld import World

ZONE = "sqldb.appliance.internal"


@pytest.fixture
def world(tmp_path):
    return World(tmp_path / "state", sqldb_failover_seconds=0.3)


@pytest.fixture
def resolver(world):
    port = free_port()
    daemon = DNSDaemon(world.store.directory, port).start()
    yield port
    daemon.stop()


def ask(port, name):
    """(rcode, [addresses]), or None while the daemon does not answer yet."""
    try:
        r = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port,
                          timeout=0.5)
    except (dns.exception.Timeout, OSError):
        return None
    return r.rcode(), sorted(rd.to_text() for rrset in r.answer for rd in rrset)


def soa_serial(world, zone):
    (soa,) = [r for r in world.store.collection("dns_records").by("domain", zone["uuid"])
              if r["type"] == "SOA"]
    return soa["record"]["serial"]


def test_no_zone_until_an_instance_has_a_primary(world):
    world.add_instance(nodes_number=1)
    assert endpoint.sync(world.store, ZONE) == 0
    assert world.store.collection("dns_domains").records() == []


def test_the_record_follows_the_primary_and_goes_with_the_instance(world, resolver):
    nodes = [world.add_node(i, f"127.0.0.{20 + i}") for i in (1, 2, 3)]
    instance = world.add_instance(nodes, sync=2)
    planner = Planner(world.store, world.settings)
    planner.pass_once()
    name = f"{instance['uuid']}.{ZONE}"
    assert world.instance(instance)["endpoint"] == name
    (zone,) = world.store.collection("dns_domains").records()
    assert (zone["name"], zone["project_id"]) == (ZONE, "00000000-0000-0000-0000-000000000000")
    assert eventually(lambda: ask(resolver, name) == (dns.rcode.NOERROR, ["127.0.0.21"]),
                      10, "the endpoint answers the first primary")
    serial = soa_serial(world, zone)
    # nothing changed: nothing written, the serial stays
    assert endpoint.sync(world.store, ZONE) == 0 and soa_serial(world, zone) == serial
    # the primary stops reporting; a replica is promoted and the record moves
    world.report(nodes[0], instance, role="primary")
    time.sleep(0.4)
    world.report(nodes[1], instance, lsn_int=5)
    world.report(nodes[2], instance, lsn_int=9)
    planner.pass_once()
    assert world.instance(instance)["primary"] == nodes[2]["uuid"]
    assert soa_serial(world, zone) == serial + 1
    assert eventually(lambda: ask(resolver, name) == (dns.rcode.NOERROR, ["127.0.0.23"]),
                      10, "the endpoint answers the new primary")
    # the instance deleted (the API removes it with its users and databases)
    world.store.collection("sqldb_instances").delete(instance["uuid"])
    planner.pass_once()
    assert [r for r in world.store.collection("dns_records").by("domain", zone["uuid"])
            if r["type"] == "A"] == []
    assert eventually(lambda: (ask(resolver, name) or (None,))[0] == dns.rcode.NXDOMAIN,
                      10, "the endpoint is gone")


# ---- the zone is the platform's: found by ownership, never by name alone --------------

PROJECT = "11111111-2222-3333-4444-555555555555"


def project_zone(world, name, wildcard_to):
    """A zone of a project, as data from before zones had one owner holds it (the API
    refuses it today): with its SOA and a wildcard A that answers every name in it."""
    zone = world.store.collection("dns_domains").insert({
        "name": name, "project_id": PROJECT, "description": "", "tags": [], "mirror": None,
        "sync_to_ecosystem": False})
    records = world.store.collection("dns_records")
    for rtype, data in (("SOA", {"primary_dns": f"ns1.{name}", "serial": 1, "refresh": 10800,
                                 "retry": 3600, "expire": 604800, "ttl": 3600}),
                        ("A", {"address": wildcard_to})):
        records.insert({"domain": zone["uuid"], "project_id": PROJECT, "type": rtype,
                        "ttl": 5, "prio": None, "disabled": False, "tags": [],
                        "record": {"kind": rtype, "name": "@" if rtype == "SOA" else "*",
                                   **data}})
    return zone


@pytest.mark.parametrize("squatted", [ZONE, "appliance.internal", f"x.{ZONE}"],
                         ids=["same name", "parent", "child"])
def test_a_project_zone_named_like_the_dbaas_zone_is_never_written_into(world, resolver,
                                                                          squatted):
    intruder = project_zone(world, squatted, "10.66.6.6")
    before = sorted((r["uuid"], r["revision"]) for r in
                    world.store.collection("dns_records").records())
    nodes = [world.add_node(1, "127.0.0.21")]
    instance = world.add_instance(nodes)
    Planner(world.store, world.settings).pass_once()
    # nothing written into any zone, no zone of the platform made beside it
    assert sorted((r["uuid"], r["revision"]) for r in
                  world.store.collection("dns_records").records()) == before
    assert [z["uuid"] for z in world.store.collection("dns_domains").records()] == \
        [intruder["uuid"]]
    # no endpoint handed out: it would resolve to the project's records
    assert world.instance(instance)["endpoint"] is None
    with pytest.raises(endpoint.ZoneTaken):
        endpoint.ensure_zone(world.store, ZONE)
    # what the daemon answers for the instance's name is the intruder's, not ours: the
    # reason no endpoint is given
    name = f"{instance['uuid']}.{ZONE}"
    if squatted != f"x.{ZONE}":
        assert eventually(lambda: ask(resolver, name) == (dns.rcode.NOERROR, ["10.66.6.6"]),
                          10, "the daemon serves the project's zone")
    # once an admin removes the project's zone, the platform's is made and used
    world.store.collection("dns_domains").delete(intruder["uuid"])
    Planner(world.store, world.settings).pass_once()
    (zone,) = world.store.collection("dns_domains").records()
    assert zone["project_id"] == "00000000-0000-0000-0000-000000000000"
    assert world.instance(instance)["endpoint"] == name
    assert eventually(lambda: ask(resolver, name) == (dns.rcode.NOERROR, ["127.0.0.21"]),
                      10, "the endpoint answers from the platform's zone")
