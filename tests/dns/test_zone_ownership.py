"""A DNS zone has one owner (appliance/tenancy/zones.py; docs/security.md).

Each attack is made by project B's owner against names of project A, of the platform, or
of everyone (a TLD), through the real API on loopback. Each is refused with 409, the
message names the other zone only to a platform caller, nothing is created, and the
victim's names are answered exactly as before by the real DNS daemon over UDP. "As
before" is read only once the daemon has served a change made after the attacks (B's own
zone), so that a change the attacks made would have been served too."""

import threading

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from appliance.tenancy import zones as zone_rule
from tests.apiserver import ApiServer, free_port
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import bind, make_project, make_user
from tests.waiting import eventually

from .test_server import DNSDaemon

D = "/v1/dns/domains"
RESERVED_EXTRA = "ops.platform.internal"     # a zone the platform_zones setting names
SQLDB_ZONE = "sqldb.appliance.internal"      # the default sqldb_zone

# the names whose answers must not move: (name, type)
WATCHED = [("www.a-zone.test", "A"), ("a-zone.test", "SOA"), ("x.www.a-zone.test", "A"),
           ("app.victim.test", "A"), ("victim.test", "A"), ("www.admin-zone.test", "A"),
           ("x.admin-zone.test", "A"), ("db1.sqldb.appliance.internal", "A"),
           ("nowhere.test", "A"), ("test", "SOA")]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    platform_zones=RESERVED_EXTRA).start()
    daemon = DNSDaemon(srv.settings["state_dir"], free_port()).start()
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    w = {"srv": srv, "daemon": daemon, "admin": admin}
    for side in ("a", "b"):
        project = make_project(admin)
        user, name, password = make_user(admin)
        bind(admin, user, "owner", project)
        w[side] = project
        w[f"owner_{side}"] = srv.client(srv.login(name, password, scope=f"project:{project}"))
    # the victims: project A's zones, and an admin zone
    a_zone = create(w["owner_a"], "a-zone.test", w["a"])
    add_a(w["owner_a"], a_zone, "www", "10.32.1.10")
    victim = create(w["owner_a"], "app.victim.test", w["a"])
    add_a(w["owner_a"], victim, "@", "10.32.1.11")
    admin_zone = create(admin, "admin-zone.test", ADMIN_PROJECT)
    add_a(admin, admin_zone, "www", "10.20.0.1")
    eventually(lambda: answer(daemon.port, "www.admin-zone.test", "A")[1] == ["10.20.0.1"],
               10, "the daemon serves the victims' zones")
    yield w
    daemon.stop()
    srv.stop()


def create(client, name, project_id):
    resp = client.post(D, {"name": name, "project_id": project_id})
    assert resp.status == 201, resp
    return resp.json


def add_a(client, zone, name, address):
    resp = client.post(f"{D}/{zone['uuid']}/records",
                       {"type": "A", "record": {"kind": "A", "name": name, "address": address}})
    assert resp.status == 201, resp
    return resp.json


def answer(port, name, rtype):
    """(rcode, sorted answer rdata) of our DNS daemon, over UDP on loopback."""
    for _ in range(20):
        try:
            r = dns.query.udp(dns.message.make_query(name, rtype), "127.0.0.1", port=port,
                              timeout=0.5)
        except dns.exception.Timeout:
            continue
        return dns.rcode.to_text(r.rcode()), sorted(rd.to_text() for s in r.answer for rd in s)
    raise AssertionError(f"no answer for {name} {rtype}")


def answers(world):
    return {(n, t): answer(world["daemon"].port, n, t) for n, t in WATCHED}


def zone_names(world):
    return sorted(d["name"] for d in world["admin"].get(D).json)


def settle(world, label):
    """A change of B's own made after the attacks, answered: the daemon has caught up."""
    zone = create(world["owner_b"], f"{label}.b-zone.test", world["b"])
    add_a(world["owner_b"], zone, "@", "10.32.2.2")
    eventually(lambda: answer(world["daemon"].port, f"{label}.b-zone.test", "A")[1]
               == ["10.32.2.2"], 10, "the daemon serves B's own new zone")


ATTACKS = [
    # (what, the zone B asks for, what the platform's message names)
    ("a child inside another project's zone", "www.a-zone.test", "a-zone.test"),
    ("a grandchild inside another project's zone", "x.www.a-zone.test", "a-zone.test"),
    ("the parent over another project's zone", "victim.test", "app.victim.test"),
    ("a zone under an admin zone", "x.admin-zone.test", "admin-zone.test"),
    ("the same name as another project's zone", "a-zone.test", "a-zone.test"),
    ("the DBaaS zone", SQLDB_ZONE, SQLDB_ZONE),
    ("a child of the DBaaS zone", f"db1.{SQLDB_ZONE}", SQLDB_ZONE),
    ("a parent of the DBaaS zone", "appliance.internal", SQLDB_ZONE),
    ("a zone the platform_zones setting reserves", RESERVED_EXTRA, RESERVED_EXTRA),
]


@pytest.mark.parametrize("what,name,named", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_project_owner_cannot_take_over_another_owners_names(world, what, name, named):
    before_answers, before_zones = answers(world), zone_names(world)
    resp = world["owner_b"].post(D, {"name": name, "project_id": world["b"]})
    assert resp.status == 409, resp
    assert resp.json["type"] == "Conflict" and resp.json["code"] == 409
    message = resp.json["message"]
    # the other owner's zone is not named to a project's caller
    assert zone_rule.ANOTHER_OWNER in message
    assert named not in message and "a-zone" not in message and "admin-zone" not in message
    assert world["a"] not in message
    # the platform is told which zone it is
    platform = world["admin"].post(D, {"name": name, "project_id": world["b"]})
    assert platform.status == 409, platform
    assert named in platform.json["message"]
    # nothing created, and the victims' names answer as before
    assert zone_names(world) == before_zones
    settle(world, what.replace(" ", "-").replace("'", ""))
    assert answers(world) == before_answers


def test_a_top_level_zone_needs_an_unscoped_admin(world):
    before_answers, before_zones = answers(world), zone_names(world)
    resp = world["owner_b"].post(D, {"name": "test", "project_id": world["b"]})
    assert resp.status == 409, resp
    assert "top-level" in resp.json["message"] and "unscoped admin" in resp.json["message"]
    # for a TLD nobody's zone is below yet, the same: it is the kind of name that is refused
    resp = world["owner_b"].post(D, {"name": "intruder", "project_id": world["b"]})
    assert resp.status == 409, resp
    # even an unscoped admin may not put a TLD over a project's zones: one owner per name
    resp = world["admin"].post(D, {"name": "test", "project_id": ADMIN_PROJECT})
    assert resp.status == 409, resp
    assert "of project" in resp.json["message"]
    assert zone_names(world) == before_zones
    settle(world, "tld")
    assert answers(world) == before_answers


def test_a_token_scoped_to_the_admin_project_is_not_an_unscoped_admin(world):
    """The platform, but acting inside a project: a whole TLD is not its decision."""
    srv, admin = world["srv"], world["admin"]
    user, name, password = make_user(admin)
    bind(admin, user, "admin", ADMIN_PROJECT)
    scoped = srv.client(srv.login(name, password, scope=f"project:{ADMIN_PROJECT}"))
    before = zone_names(world)
    resp = scoped.post(D, {"name": "scoped", "project_id": ADMIN_PROJECT})
    assert resp.status == 409 and "unscoped admin" in resp.json["message"], resp
    # it is still a platform caller: a refusal names the other owner's zone
    resp = scoped.post(D, {"name": "x.a-zone.test", "project_id": ADMIN_PROJECT})
    assert resp.status == 409 and "a-zone.test of project" in resp.json["message"], resp
    assert zone_names(world) == before


def test_a_zone_name_cannot_be_changed(world):
    """Names are create-only: no update can move a zone under another owner's."""
    zone = create(world["owner_b"], "movable.b-zone.test", world["b"])
    resp = world["owner_b"].put(f"{D}/{zone['uuid']}", {"name": "www.a-zone.test"})
    assert resp.status in (400, 403), resp
    assert world["admin"].get(f"{D}/{zone['uuid']}").json["name"] == "movable.b-zone.test"


def test_the_same_project_may_nest_its_own_zones(world):
    inner = create(world["owner_a"], "shop.a-zone.test", world["a"])
    add_a(world["owner_a"], inner, "@", "10.32.1.12")
    eventually(lambda: answer(world["daemon"].port, "shop.a-zone.test", "A")[1]
               == ["10.32.1.12"], 10, "A's nested zone is served")
    # and around its own zone too
    outer = create(world["owner_a"], "corp.app.victim.test", world["a"])
    assert outer["project_id"] == world["a"]


def test_an_unscoped_admin_may_create_a_top_level_zone(world):
    zone = create(world["admin"], "example", ADMIN_PROJECT)
    add_a(world["admin"], zone, "host", "10.20.0.2")
    eventually(lambda: answer(world["daemon"].port, "host.example", "A")[1]
               == ["10.20.0.2"], 10, "the admin's TLD is served")
    # the platform may hand a TLD to a project, where no other owner is below it
    handed = create(world["admin"], "corp", world["b"])
    assert handed["project_id"] == world["b"]
    # and a project owner then cannot nest under another owner's TLD
    resp = world["owner_a"].post(D, {"name": "x.corp", "project_id": world["a"]})
    assert resp.status == 409 and zone_rule.ANOTHER_OWNER in resp.json["message"]


def test_the_platform_may_create_its_reserved_zones(world):
    zone = create(world["admin"], RESERVED_EXTRA, ADMIN_PROJECT)
    assert zone["project_id"] == ADMIN_PROJECT
    # not for a project, even when the platform asks
    resp = world["admin"].post(D, {"name": f"x.{RESERVED_EXTRA}", "project_id": world["a"]})
    assert resp.status == 409 and "reserved for the platform" in resp.json["message"]
    # the platform nests its own zones inside
    create(world["admin"], f"eu.{RESERVED_EXTRA}", ADMIN_PROJECT)


def test_concurrent_nested_creations_by_two_owners_never_both_succeed(world):
    """Two owners race for a zone and its child, again and again: at most one wins each
    round (the check and the insert are one step under the kind's lock)."""
    for i in range(8):
        parent, child = f"race{i}.test", f"in.race{i}.test"
        results = {}

        def attempt(side, name):
            resp = world[f"owner_{side}"].post(D, {"name": name, "project_id": world[side]})
            results[side] = resp.status

        threads = [threading.Thread(target=attempt, args=("a", parent)),
                   threading.Thread(target=attempt, args=("b", child))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results.values()) == [201, 409], results
        made = [d for d in world["admin"].get(D).json if d["name"] in (parent, child)]
        assert len(made) == 1


def test_the_rule_in_plain_terms():
    a, b = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
    zones = [{"name": "a.test", "project_id": a}, {"name": "srv.b.test", "project_id": b}]
    settings = {"sqldb_zone": SQLDB_ZONE, "platform_zones": "x.internal, Y.Internal."}
    assert zone_rule.reserved_names(settings) == {SQLDB_ZONE, "x.internal", "y.internal"}
    assert zone_rule.refusal("sub.a.test", a, zones, settings) is None
    assert zone_rule.refusal("sub.a.test", b, zones, settings) is not None
    assert zone_rule.refusal("b.test", b, zones, settings) is None        # its own child
    assert zone_rule.refusal("b.test", a, zones, settings) is not None    # B's child below
    assert zone_rule.refusal("aa.test", b, zones, settings) is None       # not a label boundary
    assert zone_rule.refusal("y.internal", a, zones, settings) is not None
    assert zone_rule.refusal("y.internal", ADMIN_PROJECT, zones, settings) is None
    # covering a name: every zone above it must be the project's; a wildcard also
    # reaches the apex of a zone one label below
    assert zone_rule.foreign_cover("www.a.test", a, zones) is None
    assert zone_rule.foreign_cover("x.srv.b.test", a, zones)["name"] == "srv.b.test"
    assert zone_rule.foreign_cover("b.test", a, zones) is None
    assert zone_rule.foreign_cover("b.test", a, zones, wildcard=True)["name"] == "srv.b.test"
    legacy = zones + [{"name": "sqldb.appliance.internal", "project_id": b}]
    assert zone_rule.platform_zone(SQLDB_ZONE, legacy) is None


def test_the_server_log_names_nested_zones_of_two_owners():
    """Zones made before the rule are still served (the most specific answers), and each
    build of the index names them for an admin."""
    from appliance.dns.zones import ZoneIndex

    def soa(uuid, name, project):
        return ({"uuid": uuid, "name": name, "project_id": project},
                {"uuid": uuid + "-soa", "domain": uuid, "type": "SOA", "ttl": 60,
                 "record": {"kind": "SOA", "name": "@", "primary_dns": f"ns1.{name}",
                            "serial": 1, "refresh": 1, "retry": 1, "expire": 1, "ttl": 1}})
    parts = [soa("d1", "a.test", "pa"), soa("d2", "www.a.test", "pb"),
             soa("d3", "shop.a.test", "pa")]
    index = ZoneIndex.build([d for d, _ in parts], [r for _, r in parts])
    nested = [p for p in index.problems if "one owner" in p]
    assert len(nested) == 1 and "www.a.test" in nested[0] and "pb" in nested[0]
    assert len(index.zones) == 3
