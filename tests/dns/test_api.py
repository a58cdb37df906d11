"""Domains and records through the API: shapes, the SOA and its serial, q=tags, and every
validation rule as a 400 with the error body."""

import uuid

import pytest

from appliance.dns.resources import TXT_LIMIT
from appliance.iam.builtin import ADMIN_PROJECT

D = "/v1/dns/domains"


def make_domain(admin, name=None, **fields):
    resp = admin.post(D, {"name": name or f"z{uuid.uuid4().hex[:8]}.test",
                          "project_id": ADMIN_PROJECT, **fields})
    assert resp.status == 201, resp
    return resp.json


def records(domain):
    return f"{D}/{domain['uuid']}/records"


def soa(admin, domain):
    found = [r for r in admin.get(records(domain)).json if r["type"] == "SOA"]
    assert len(found) == 1
    return found[0]


def a_record(name="www", address="10.20.0.5", **extra):
    return {"type": "A", "record": {"kind": "A", "name": name, "address": address}, **extra}


def test_domain_gets_its_soa(admin):
    domain = make_domain(admin, name="Example.Test.")
    assert domain["name"] == "example.test"
    record = soa(admin, domain)
    assert record["record"]["name"] == "@" and record["record"]["serial"] >= 1
    assert record["domain"] == f"{D}/{domain['uuid']}"
    assert record["project_id"] == ADMIN_PROJECT


def test_record_shape_and_location(admin):
    domain = make_domain(admin)
    resp = admin.post(records(domain), a_record(tags=["web"]))
    assert resp.status == 201, resp
    body = resp.json
    assert resp.header("location") == f"{records(domain)}/{body['uuid']}"
    assert body["type"] == "A" and body["ttl"] == 3600 and body["prio"] is None
    assert body["disabled"] is False and body["tags"] == ["web"]
    assert body["record"] == {"kind": "A", "name": "www", "address": "10.20.0.5"}
    assert admin.get(f"{records(domain)}/{body['uuid']}").json == body
    # an item of one domain is not found under another
    other = make_domain(admin)
    assert admin.get(f"{records(other)}/{body['uuid']}").status == 404


def test_serial_grows_on_every_change_of_the_zone(admin):
    domain = make_domain(admin)
    serials = [soa(admin, domain)["record"]["serial"]]
    made = admin.post(records(domain), a_record()).json
    serials.append(soa(admin, domain)["record"]["serial"])
    admin.put(f"{records(domain)}/{made['uuid']}",
              {"record": {"kind": "A", "name": "www", "address": "10.20.0.6"}})
    serials.append(soa(admin, domain)["record"]["serial"])
    admin.delete(f"{records(domain)}/{made['uuid']}")
    serials.append(soa(admin, domain)["record"]["serial"])
    assert serials == sorted(set(serials)), serials


def test_soa_is_deleted_only_with_its_domain(admin):
    domain = make_domain(admin)
    record = soa(admin, domain)
    resp = admin.delete(f"{records(domain)}/{record['uuid']}")
    assert resp.status == 403 and resp.json["type"] == "Forbidden"
    admin.post(records(domain), a_record())
    assert admin.delete(f"{D}/{domain['uuid']}").status == 204
    assert admin.get(records(domain)).status == 404
    assert admin.get(f"{records(domain)}/{record['uuid']}").status == 404


def test_second_soa_is_409(admin):
    domain = make_domain(admin)
    resp = admin.post(records(domain), {"type": "SOA", "record": {
        "kind": "SOA", "name": "@", "primary_dns": "ns2.example.test", "serial": 1,
        "refresh": 1, "retry": 1, "expire": 1, "ttl": 1}})
    assert resp.status == 409


def test_q_tags_filter(admin):
    domain = make_domain(admin)
    mine = admin.post(records(domain), a_record("a", tags=["realm:abc", "x"])).json
    admin.post(records(domain), a_record("b", tags=["realm:other"]))
    admin.post(records(domain), a_record("c"))
    found = admin.get(records(domain), query={"q": 'tags:"realm:abc"'}).json
    assert [r["uuid"] for r in found] == [mine["uuid"]]
    for bad in ('tags:realm:abc', 'name:"a"', 'tags:""'):
        resp = admin.get(records(domain), query={"q": bad})
        assert resp.status == 400 and resp.json["type"] == "ValidationError"
    resp = admin.get(records(domain), query={"nonsense": "1"})
    assert resp.status == 400
    resp = admin.get(records(domain), query={"ttl": "long"})
    assert resp.status == 400


BAD = [
    ("A address not IPv4", a_record(address="10.0.0.256"), "address"),
    ("A address IPv6", a_record(address="::1"), "address"),
    ("A address missing", {"type": "A", "record": {"kind": "A", "name": "x"}}, "address"),
    ("kind differs from type", {"type": "A", "record": {"kind": "TXT", "name": "x",
                                                        "content": "hi"}}, "kind"),
    ("unknown type", {"type": "MX", "record": {"kind": "MX", "name": "x"}}, "type"),
    ("label too long", a_record(name="a" * 64), "name"),
    ("bad label chars", a_record(name="bad name"), "name"),
    ("label starts with -", a_record(name="-x"), "name"),
    ("wildcard inside", a_record(name="a.*"), "name"),
    ("name too long", a_record(name=".".join(["a" * 60] * 5)), "name"),
    ("TXT too long", {"type": "TXT", "record": {"kind": "TXT", "name": "t",
                                                "content": "x" * (TXT_LIMIT + 1)}}, "content"),
    ("TXT empty", {"type": "TXT", "record": {"kind": "TXT", "name": "t", "content": ""}},
     "content"),
    ("NS not a host", {"type": "NS", "record": {"kind": "NS", "name": "@",
                                                "content": "not a host"}}, "content"),
    ("unknown record field", {"type": "A", "record": {"kind": "A", "name": "x",
                                                      "address": "10.0.0.1", "mx": 1}}, "mx"),
    ("ttl negative", a_record(ttl=-1), "ttl"),
    ("ttl over 2^31-1", a_record(ttl=2 ** 31), "ttl"),
    ("ttl string", a_record(ttl="3600"), "ttl"),
    ("disabled string", a_record(disabled="no"), "disabled"),
    ("tags not strings", a_record(tags=[1]), "tags"),
    ("unknown field", a_record(weight=5), "weight"),
    ("domain of another path", a_record(domain=str(uuid.uuid4())), "domain"),
]


@pytest.mark.parametrize("why,body,word", BAD, ids=[b[0] for b in BAD])
def test_bad_records_are_400(admin, why, body, word):
    domain = make_domain(admin)
    before = len(admin.get(records(domain)).json)
    resp = admin.post(records(domain), body)
    assert resp.status == 400, (why, resp)
    assert set(resp.json) == {"type", "code", "message"}
    assert word in resp.json["message"], (why, resp.json["message"])
    assert len(admin.get(records(domain)).json) == before


def test_type_is_immutable_and_record_checked_on_update(admin):
    domain = make_domain(admin)
    made = admin.post(records(domain), a_record()).json
    item = f"{records(domain)}/{made['uuid']}"
    assert admin.put(item, {"type": "TXT"}).status == 403
    resp = admin.put(item, {"record": {"kind": "TXT", "name": "www", "content": "x"}})
    assert resp.status == 400 and "kind" in resp.json["message"]
    resp = admin.put(item, {"record": {"kind": "A", "name": "www", "address": "300.1.1.1"}})
    assert resp.status == 400
    assert admin.get(item).json["record"]["address"] == "10.20.0.5"


@pytest.mark.parametrize("name", ["bad domain", "-x.test", "a" * 64 + ".test", "x..test"])
def test_bad_domain_names(admin, name):
    resp = admin.post(D, {"name": name, "project_id": ADMIN_PROJECT})
    assert resp.status == 400 and "name" in resp.json["message"]


def test_duplicate_domain_is_409(admin):
    domain = make_domain(admin)
    resp = admin.post(D, {"name": domain["name"].upper(), "project_id": ADMIN_PROJECT})
    assert resp.status == 409


def test_records_of_a_missing_domain_are_404(admin):
    missing = f"{D}/{uuid.uuid4()}/records"
    assert admin.get(missing).status == 404
    assert admin.post(missing, a_record()).status == 404


@pytest.mark.parametrize("mode", ["no_filter", "none"])
def test_upstreams_without_tag_filter_or_tags(tmp_path, mode):
    """What the mirror meets on older upstreams (spec 2.8 rules 5 and 6)."""
    from tests.apiserver import ApiServer
    from tests.conftest import ADMIN_PASSWORD
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, dns_tags=mode).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        domain = make_domain(admin)
        refused = admin.get(records(domain), query={"q": 'tags:"realm:x"'})
        assert refused.status == 400 and "q" in refused.json["message"]
        made = admin.post(records(domain), a_record(tags=["realm:x"]) if mode == "no_filter"
                          else a_record())
        assert made.status == 201
        if mode == "none":
            assert "tags" not in made.json
            assert admin.post(records(domain), a_record("t", tags=["x"])).status == 400
        else:
            assert made.json["tags"] == ["realm:x"]
    finally:
        srv.stop()
