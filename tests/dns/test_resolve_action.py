"""GET /v1/dns/domains/<uuid>/actions/resolve: a real query to the running DNS daemon,
through the real API on Waitress, and the tenant rule on which names may be asked
(docs/security.md, "DNS resolve action")."""

import pytest

from appliance.tenancy import zones as zone_rule
from tests.apiserver import ApiServer, free_port
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user

from .test_api_to_server import wait_answer
from .test_server import DNSDaemon


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    port = free_port()
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    dns_port=port).start()
    daemon = DNSDaemon(srv.settings["state_dir"], port).start()
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    people = {"admin": admin}
    domains = {}
    for label in ("mine", "theirs"):
        project = make_project(admin)
        for role in ("owner", "reader"):
            uid, username, password = make_user(admin)
            bind(admin, uid, role, project)
            people[f"{label}-{role}"] = srv.client(srv.login(username, password,
                                                             f"project:{project}"))
        domain = admin.post("/v1/dns/domains", {"name": f"{label}.resolve.test",
                                                "project_id": project}).json
        admin.post(f"/v1/dns/domains/{domain['uuid']}/records",
                   {"type": "A", "record": {"kind": "A", "name": "www",
                                            "address": "10.9.0.1" if label == "mine"
                                            else "10.9.0.2"}})
        domains[label] = domain
    platform = admin.post("/v1/dns/domains", {"name": "platform.resolve.test",
                                              "project_id": ADMIN_PROJECT}).json
    domains["platform"] = platform
    wait_answer(port, "www.theirs.resolve.test", "A",
                lambda r: any("10.9.0.2" in str(rr) for rr in r.answer))
    yield srv, daemon, people, domains
    daemon.stop()
    srv.stop()


def resolve(client, domain, **query):
    return client.get(f"/v1/dns/domains/{domain['uuid']}/actions/resolve", query=query)


def test_the_answer_is_the_servers(world):
    _, daemon, people, domains = world
    resp = resolve(people["mine-owner"], domains["mine"], name="www.mine.resolve.test")
    assert resp.status == 200, resp
    body = resp.json
    assert body["rcode"] == "NOERROR" and body["authoritative"] is True
    assert body["transport"] == "udp" and body["server"] == f"127.0.0.1:{daemon.port}"
    assert body["answer"] == [{"name": "www.mine.resolve.test", "type": "A",
                               "ttl": 3600, "data": "10.9.0.1"}]
    assert body["elapsed_ms"] >= 0
    soa = resolve(people["mine-reader"], domains["mine"], name="mine.resolve.test.",
                  type="soa").json
    assert soa["type"] == "SOA" and soa["answer"][0]["type"] == "SOA"
    missing = resolve(people["mine-reader"], domains["mine"],
                      name="nothere.mine.resolve.test").json
    assert missing["rcode"] == "NXDOMAIN" and missing["answer"] == []
    assert missing["authority"][0]["type"] == "SOA"


def test_a_long_txt_comes_over_tcp(world):
    srv, _, people, domains = world
    text = "x" * 3000       # more than a UDP answer of 512 bytes holds: truncated
    made = people["mine-owner"].post(
        f"/v1/dns/domains/{domains['mine']['uuid']}/records",
        {"type": "TXT", "record": {"kind": "TXT", "name": "long", "content": text}})
    assert made.status == 201, made
    wait_answer(srv.settings["dns_port"], "long.mine.resolve.test", "TXT",
                lambda r: r.rcode() == 0 and (r.answer or r.flags & 0x0200))
    body = resolve(people["mine-owner"], domains["mine"], name="long.mine.resolve.test",
                   type="TXT").json
    assert body["transport"] == "tcp"
    assert "".join(body["answer"][0]["data"].replace('"', "").split()) == text


# (caller, domain asked through, name) -> status: a name is answered only through a
# domain the caller may read, and only inside it
MATRIX = [
    ("mine-owner", "mine", "www.mine.resolve.test", 200),
    ("mine-reader", "mine", "www.mine.resolve.test", 200),
    ("theirs-owner", "mine", "www.mine.resolve.test", 404),
    ("admin", "mine", "www.mine.resolve.test", 200),
    ("mine-owner", "mine", "www.theirs.resolve.test", 400),
    ("mine-reader", "mine", "www.theirs.resolve.test", 400),
    ("mine-owner", "theirs", "www.theirs.resolve.test", 404),
    ("admin", "mine", "www.theirs.resolve.test", 400),
    ("admin", "theirs", "www.theirs.resolve.test", 200),
    ("mine-owner", "mine", "platform.resolve.test", 400),
    ("mine-owner", "platform", "platform.resolve.test", 404),
    ("mine-owner", "mine", "example.com", 400),
    ("mine-owner", "mine", "resolve.test", 400),
    ("mine-owner", "mine", "localhost", 400),
    ("admin", "mine", "example.com", 400),
]


@pytest.mark.parametrize("who,through,name,status", MATRIX)
def test_tenant_matrix(world, who, through, name, status):
    _, _, people, domains = world
    resp = resolve(people[who], domains[through], name=name)
    assert resp.status == status, resp
    if status == 200:
        assert resp.json["answer"] or resp.json["rcode"] == "NOERROR"
        wanted = "10.9.0.2" if "theirs" in name else "10.9.0.1"
        assert resp.json["answer"][0]["data"] == wanted
    else:
        assert set(resp.json) == {"type", "code", "message"}
        assert resp.json["code"] == status
        assert "10.9.0.2" not in resp.raw.decode()
    if status == 400:
        assert "is not inside the domain" in resp.json["message"]


@pytest.mark.parametrize("query,field", [
    ({}, "name"),
    ({"name": ""}, "name"),
    ({"name": "bad name.mine.resolve.test"}, "name"),
    ({"name": "a" * 300}, "name"),
    ({"name": "www.mine.resolve.test", "type": "ANY"}, "type"),
    ({"name": "www.mine.resolve.test", "type": "AXFR"}, "type"),
    ({"name": ["www.mine.resolve.test", "x.mine.resolve.test"]}, "name"),
])
def test_bad_queries_are_400(world, query, field):
    _, _, people, domains = world
    resp = resolve(people["mine-owner"], domains["mine"], **query)
    assert resp.status == 400, resp
    assert resp.json["type"] == "ValidationError" and resp.json["message"].startswith(field)


def test_unknown_domain_is_404(world):
    _, _, people, _ = world
    resp = resolve(people["mine-owner"], {"uuid": "00000000-0000-0000-0000-0000000000aa"},
                   name="www.mine.resolve.test")
    assert resp.status == 404 and resp.json["type"] == "NotFound"


def test_a_server_that_does_not_answer_is_503(tmp_path):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, dns_port=free_port()).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        domain = admin.post("/v1/dns/domains", {"name": "down.test",
                                                "project_id": ADMIN_PROJECT}).json
        resp = resolve(admin, domain, name="down.test")
        assert resp.status == 503, resp
        assert resp.json["type"] == "ServiceUnavailable"
        assert "GET /v1/system/daemons" in resp.json["message"]
    finally:
        srv.stop()


def test_openapi_documents_it(world):
    srv, _, people, _ = world
    doc = srv.client().get("/v1/openapi.json").json
    op = doc["paths"]["/v1/dns/domains/{uuid}/actions/resolve"]["get"]
    assert op["x-permission"] == "dns.domain.read"
    assert {p["name"] for p in op["parameters"]} >= {"uuid", "name", "type"}


def test_a_foreign_zone_below_the_domain_is_refused():
    """A zone of another owner nested in the domain (left from before the one-owner
    rule) answers its names instead: they are not the domain's to show."""
    zones = [{"name": "a.test", "project_id": "p1"}, {"name": "x.a.test", "project_id": "p2"}]
    assert zone_rule.resolve_refusal(zones[0], "www.a.test", zones) is None
    assert zone_rule.resolve_refusal(zones[0], "www.x.a.test", zones) is not None
    assert zone_rule.resolve_refusal(zones[0], "a.test.", zones) is None
    assert zone_rule.resolve_refusal(zones[0], "ba.test", zones) is not None


def test_concurrent_asks_all_answer(world):
    """Requests in parallel (more than the API's threads) each get their own answer."""
    import concurrent.futures
    _, _, people, domains = world
    names = [("www.mine.resolve.test", "mine", "10.9.0.1"),
             ("www.theirs.resolve.test", "theirs", "10.9.0.2")] * 8
    who = {"mine": people["mine-owner"], "theirs": people["theirs-owner"]}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda n: (resolve(who[n[1]], domains[n[1]], name=n[0]),
                                           n[2]), names))
    for resp, wanted in answers:
        assert resp.status == 200, resp
        assert resp.json["answer"][0]["data"] == wanted
