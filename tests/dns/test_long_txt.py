"""Long TXT records (issue 27): the reference's 5,000-character record is accepted, split
into 255-byte character-strings, refused over UDP with TC and given whole over TCP, as a
real resolver (dnspython's, and dig when installed) follows it. The content limit is
64,986 bytes of UTF-8: the longest record whose answer fits in one DNS message whatever
name is asked (docs/dns-server.md)."""

import shutil
import subprocess
import time

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.resolver
import pytest

from appliance.dns import zones
from appliance.dns.resources import TXT_LIMIT
from appliance.iam.builtin import ADMIN_PROJECT
from tests.conftest import ADMIN_PASSWORD

from .test_api_to_server import world  # noqa: F401 - the API server and DNS daemon

REFERENCE_CONTENT = "x" * 5000


@pytest.fixture(scope="module")
def zone(world):  # noqa: F811
    srv, daemon = world
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    domain = admin.post("/v1/dns/domains", {"name": "long.test",
                                            "project_id": ADMIN_PROJECT}).json
    return admin, daemon, f"/v1/dns/domains/{domain['uuid']}/records"


def txt(name, content, ttl=3600):
    """The reference's body."""
    return {"type": "TXT", "ttl": ttl, "record": {"kind": "TXT", "name": name,
                                                  "content": content}}


def tcp(port, name, rtype="TXT"):
    return dns.query.tcp(dns.message.make_query(name, rtype), "127.0.0.1", port=port,
                         timeout=2)


def udp(port, name, rtype="TXT", **edns):
    return dns.query.udp(dns.message.make_query(name, rtype, **edns), "127.0.0.1",
                         port=port, timeout=2)


def served_strings(port, name, timeout=15.0):
    """The character-strings of the one TXT record at `name` over TCP, once served (the
    daemon may still be starting, or not yet have the record)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            r = tcp(port, name)
        except (OSError, dns.exception.Timeout):
            time.sleep(0.05)
            continue
        if r.answer:
            assert not r.flags & dns.flags.TC and r.rcode() == dns.rcode.NOERROR
            [rrset] = r.answer
            [rdata] = list(rrset)
            return list(rdata.strings)
        time.sleep(0.01)
    raise AssertionError(f"{name} TXT not served within {timeout} s")


def count(admin, records):
    return len(admin.get(records).json)


def test_the_reference_5000_character_txt_is_created_and_served_over_tcp(zone):
    admin, daemon, records = zone
    made = admin.post(records, txt("big", REFERENCE_CONTENT))
    assert made.status == 201, made
    assert admin.get(f"{records}/{made.json['uuid']}").json["record"]["content"] == \
        REFERENCE_CONTENT
    strings = served_strings(daemon.port, "big.long.test")
    assert [len(s) for s in strings] == [255] * 19 + [5000 - 19 * 255]
    assert b"".join(strings).decode() == REFERENCE_CONTENT
    # over UDP it does not fit, with or without EDNS: TC and an empty answer section
    for edns in ({}, {"use_edns": 0, "payload": 4096}):
        r = udp(daemon.port, "big.long.test", **edns)
        assert r.flags & dns.flags.TC and not r.answer, edns
        assert r.rcode() == dns.rcode.NOERROR
    # a real resolver starts over UDP, sees TC and takes the answer over TCP
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers, resolver.port = ["127.0.0.1"], daemon.port
    answer = resolver.resolve("big.long.test", "TXT", lifetime=5)
    assert b"".join(answer[0].strings).decode() == REFERENCE_CONTENT


@pytest.mark.skipif(shutil.which("dig") is None, reason="dig is not installed")
def test_dig_retries_over_tcp_and_gets_the_whole_record(zone):
    admin, daemon, records = zone
    assert admin.post(records, txt("dug", REFERENCE_CONTENT)).status == 201
    served_strings(daemon.port, "dug.long.test")
    out = subprocess.run(["dig", "@127.0.0.1", "-p", str(daemon.port), "+short",
                          "+tries=1", "+time=2", "dug.long.test", "TXT"],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    # +short prints the strings quoted and separated by spaces
    assert out.replace('"', "").replace(" ", "").strip() == REFERENCE_CONTENT


def test_the_exact_limit_is_served_and_one_byte_more_is_400(zone):
    admin, daemon, records = zone
    assert TXT_LIMIT == 64986 == zones.TXT_MAX_OCTETS
    content = "".join(chr(ord("a") + i % 26) for i in range(TXT_LIMIT))
    made = admin.post(records, txt("limit", content))
    assert made.status == 201, made
    strings = served_strings(daemon.port, "limit.long.test")
    assert len(strings) == 255 and b"".join(strings).decode() == content
    before = count(admin, records)
    over = admin.post(records, txt("over", content + "a"))
    assert over.status == 400
    assert set(over.json) == {"type", "code", "message"}
    assert str(TXT_LIMIT) in over.json["message"] and "content" in over.json["message"]
    assert count(admin, records) == before
    # nor by an update: the stored record stays as it was
    grown = admin.put(f"{records}/{made.json['uuid']}",
                      {"record": txt("limit", content + "a")["record"]})
    assert grown.status == 400
    assert admin.get(f"{records}/{made.json['uuid']}").json["record"]["content"] == content


@pytest.mark.parametrize("k", [1, 2, 20])
def test_strings_are_cut_at_255_bytes(zone, k):
    admin, daemon, records = zone
    for extra in (0, 1):
        name = f"cut{k}-{extra}"
        content = "y" * (255 * k + extra)
        assert admin.post(records, txt(name, content)).status == 201
        strings = served_strings(daemon.port, f"{name}.long.test")
        assert [len(s) for s in strings] == [255] * k + ([1] if extra else [])
        assert b"".join(strings).decode() == content


def test_non_ascii_content_counts_utf8_bytes(zone):
    """The limit is in bytes of UTF-8, not characters; a character may straddle two
    strings and the joined bytes decode to the content."""
    admin, daemon, records = zone
    content = "é" * (TXT_LIMIT // 2)                # 2 bytes each: exactly the limit
    assert len(content.encode()) == TXT_LIMIT
    assert admin.post(records, txt("accent", content)).status == 201
    strings = served_strings(daemon.port, "accent.long.test")
    assert strings[0][-1:] == "é".encode()[:1]       # cut inside a character
    assert b"".join(strings).decode() == content
    before = count(admin, records)
    over = admin.post(records, txt("accent2", content + "é"))   # 32,494 characters
    assert over.status == 400 and "bytes" in over.json["message"]
    assert count(admin, records) == before


def test_an_acme_style_short_txt_is_one_string_over_udp(zone):
    admin, daemon, records = zone
    token = "Xk3d-_yv1G0eVwH0Zb0Z1aEo8Jm9oZtfbC2jkKz7mQ4"
    assert admin.post(records, txt("_acme-challenge", token, ttl=0)).status == 201
    assert served_strings(daemon.port, "_acme-challenge.long.test") == [token.encode()]
    r = udp(daemon.port, "_acme-challenge.long.test")
    assert not r.flags & dns.flags.TC
    assert [list(rd.strings) for rd in r.answer[0]] == [[token.encode()]]


def test_records_of_one_name_must_fit_one_answer_together(zone):
    admin, daemon, records = zone
    first = admin.post(records, txt("pair", "a" * 40000))
    assert first.status == 201
    served_strings(daemon.port, "pair.long.test")
    before = count(admin, records)
    second = admin.post(records, txt("pair", "b" * 40000))
    assert second.status == 409 and "pair" in second.json["message"]
    assert count(admin, records) == before
    # a disabled one is not served, so it may exist; enabling it is the same conflict
    parked = admin.post(records, {**txt("pair", "b" * 40000), "disabled": True})
    assert parked.status == 201
    enable = admin.put(f"{records}/{parked.json['uuid']}", {"disabled": False})
    assert enable.status == 409
    assert admin.get(f"{records}/{parked.json['uuid']}").json["disabled"] is True
    # together small enough: fine
    assert admin.post(records, txt("pair", "c" * 20000)).status == 201
    started = time.monotonic()
    r = tcp(daemon.port, "pair.long.test")
    while len(r.answer[0]) < 2 and time.monotonic() - started < 5:
        time.sleep(0.01)
        r = tcp(daemon.port, "pair.long.test")
    assert not r.flags & dns.flags.TC
    assert sorted(len(b"".join(rd.strings)) for rd in r.answer[0]) == [20000, 40000]


# ---- what the server does with data the API would refuse ---------------------------------

def _index(*contents, extra=()):
    domains = [{"uuid": "d", "name": "raw.test", "project_id": "p"}]
    recs = [{"uuid": "soa", "domain": "d", "type": "SOA", "ttl": 60,
             "record": {"kind": "SOA", "name": "@", "primary_dns": "ns1.raw.test"}}]
    recs += [{"uuid": f"t{i}", "domain": "d", "type": "TXT", "ttl": 60,
              "record": {"kind": "TXT", "name": "big", "content": c}}
             for i, c in enumerate(contents)]
    recs += list(extra)
    return zones.ZoneIndex.build(domains, recs)


def _ask(index, rtype, tcp):
    query = dns.message.make_query("big.raw.test", rtype)
    return dns.message.from_wire(zones.respond(index, query.to_wire(), tcp=tcp))


def test_an_rrset_too_large_for_one_message_is_servfail_over_tcp_not_a_broken_answer():
    # records written to the store around the API (its check runs under a lock)
    index = _index("a" * 40000, "b" * 40000)
    assert not index.problems
    assert _ask(index, "TXT", tcp=True).rcode() == dns.rcode.SERVFAIL
    r = _ask(index, "TXT", tcp=False)
    assert r.flags & dns.flags.TC and not r.answer


def test_any_over_tcp_keeps_the_rrsets_that_fit():
    a = {"uuid": "a", "domain": "d", "type": "A", "ttl": 60,
         "record": {"kind": "A", "name": "big", "address": "10.0.0.1"}}
    index = _index("a" * 40000, "b" * 40000, extra=[a])
    r = _ask(index, "ANY", tcp=True)
    assert r.rcode() == dns.rcode.NOERROR
    assert [rrset.rdtype for rrset in r.answer] == [dns.rdatatype.A]
    # one record over the limit is skipped when the index is built, and said why
    index = _index("x" * (TXT_LIMIT + 1))
    assert any("64986" in p for p in index.problems)
    assert _ask(index, "TXT", tcp=True).rcode() == dns.rcode.NXDOMAIN
