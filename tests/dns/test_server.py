"""The DNS server: the real daemon process (`python -m daemons.dns`) over a state dir,
asked with dnspython over real UDP and TCP on a free loopback port.

Records are written straight into the store, in the shape the API writes them
(appliance/dns/resources.py); that is what the daemon reads. A few pure tests of the
zone index and an in-process server on the portable recvfrom loop close the file.
"""

import os
import socket
import struct
import subprocess
import sys
import time

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from appliance.dns import zones
from appliance.dns.server import DNSServer
from state import Store
from tests.conftest import ROOT, RUN_LOG_DIR
from tests import processes
from tests.apiserver import free_port

PROJECT = "00000000-0000-0000-0000-000000000000"
ZONE = "example.test"
MANY = 60                   # A records of many.example.test: > 512 bytes, < 1232
LONG_TXT = "".join(chr(ord("a") + i % 26) for i in range(600))


class DNSDaemon:
    """`python -m daemons.dns` on a state dir and a port; log in the run's log dir."""

    def __init__(self, state_dir, port, host="127.0.0.1"):
        self.state_dir, self.port, self.host = state_dir, port, host
        self.proc = None

    def start(self):
        log = open(os.path.join(RUN_LOG_DIR, f"dns-{os.getpid()}-{self.port}.log"), "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
        env.update(PYTHONPATH=ROOT, APPLIANCE_STATE_DIR=self.state_dir,
                   APPLIANCE_DNS_HOST=self.host, APPLIANCE_DNS_PORT=str(self.port),
                   APPLIANCE_CONFIG=os.devnull, APPLIANCE_LOG_LEVEL="DEBUG")
        self.proc = subprocess.Popen([sys.executable, "-m", "daemons.dns"], cwd=ROOT,
                                     env=env, stdout=log, stderr=log)
        log.close()
        return self

    def stop(self):
        return processes.stop(self.proc, 5) if self.proc else None


# ---- store helpers: records as the API stores them -------------------------------------

def add_domain(store, name):
    return store.collection("dns_domains").insert({
        "name": name, "project_id": PROJECT, "description": "", "tags": [],
        "sync_to_ecosystem": False})


def add_record(store, domain, rtype, name, ttl=300, disabled=False, minimum=3600, **data):
    """`ttl` is the record's TTL; `minimum` the SOA's own "ttl" field (negative caching)."""
    if rtype == "SOA":
        data = {"primary_dns": f"ns1.{domain['name']}", "serial": 1, "refresh": 10800,
                "retry": 3600, "expire": 604800, "ttl": minimum, **data}
    return store.collection("dns_records").insert({
        "domain": domain["uuid"], "project_id": PROJECT, "type": rtype, "ttl": ttl,
        "prio": None, "disabled": disabled, "tags": [],
        "record": {"kind": rtype, "name": name, **data}})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    st = Store(str(tmp_path_factory.mktemp("dns-state")))
    d = add_domain(st, ZONE)
    add_record(st, d, "SOA", "@", ttl=3600, serial=2024010101, refresh=7200, retry=900,
               expire=1209600, minimum=120)
    add_record(st, d, "NS", "@", content=f"ns1.{ZONE}")
    add_record(st, d, "NS", "@", content=f"ns2.{ZONE}")
    add_record(st, d, "A", "ns1", address="10.0.0.53")
    add_record(st, d, "A", "www", address="10.0.0.1")
    add_record(st, d, "A", "www", address="10.0.0.2")
    add_record(st, d, "TXT", "www", content="hello world")
    add_record(st, d, "TXT", "long", content=LONG_TXT)
    add_record(st, d, "A", "*", address="10.0.0.99")
    add_record(st, d, "A", "*.wild", address="10.0.9.9")
    add_record(st, d, "A", "a.b", address="10.0.0.7")           # b.example.test: an ENT
    add_record(st, d, "A", "hidden", address="10.0.0.66", disabled=True)
    for i in range(MANY):
        add_record(st, d, "A", "many", address=f"10.1.0.{i + 1}")
    sub = add_domain(st, f"sub.{ZONE}")                     # a nested zone
    add_record(st, sub, "SOA", "@", ttl=600, serial=7, minimum=3600)
    add_record(st, sub, "A", "host", address="10.2.0.1")
    return st


@pytest.fixture(scope="module")
def daemon(store):
    port = free_port()
    proc = DNSDaemon(store.directory, port).start()
    deadline = time.monotonic() + 10
    while True:
        try:
            r = dns.query.udp(dns.message.make_query(ZONE, "SOA"), "127.0.0.1",
                              port=port, timeout=0.2)
            if r.answer:
                break
        except (dns.exception.Timeout, OSError):
            pass
        assert proc.proc.poll() is None, "the DNS daemon exited"
        assert time.monotonic() < deadline, "the DNS daemon did not answer in 10 s"
    yield proc
    proc.stop()


def udp(daemon, name, rtype="A", **kw):
    q = dns.message.make_query(name, rtype, **kw)
    return dns.query.udp(q, "127.0.0.1", port=daemon.port, timeout=2)


def tcp(daemon, name, rtype="A", **kw):
    q = dns.message.make_query(name, rtype, **kw)
    return dns.query.tcp(q, "127.0.0.1", port=daemon.port, timeout=2)


def values(response, rtype):
    return sorted(rd.to_text() for rrset in response.answer if rrset.rdtype == rtype
                  for rd in rrset)


def authority_soa(response):
    [rrset] = response.authority
    assert rrset.rdtype == dns.rdatatype.SOA
    return rrset


def raw_udp(daemon, payload, timeout=0.5):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(payload, ("127.0.0.1", daemon.port))
        try:
            return s.recv(65535)
        except socket.timeout:
            return None


# ---- record types --------------------------------------------------------------------

@pytest.mark.parametrize("transport", [udp, tcp])
def test_a_records(daemon, transport):
    r = transport(daemon, f"www.{ZONE}")
    assert r.rcode() == dns.rcode.NOERROR
    assert r.flags & dns.flags.AA and r.flags & dns.flags.QR
    assert values(r, dns.rdatatype.A) == ["10.0.0.1", "10.0.0.2"]
    assert r.answer[0].ttl == 300


def test_ns_and_soa(daemon):
    r = udp(daemon, ZONE, "NS")
    assert values(r, dns.rdatatype.NS) == [f"ns1.{ZONE}.", f"ns2.{ZONE}."]
    r = udp(daemon, ZONE, "SOA")
    [soa] = r.answer[0]
    assert r.answer[0].ttl == 3600
    assert (soa.mname.to_text(), soa.rname.to_text()) == (f"ns1.{ZONE}.", f"hostmaster.{ZONE}.")
    assert (soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum) == (
        2024010101, 7200, 900, 1209600, 120)


def test_txt(daemon):
    r = udp(daemon, f"www.{ZONE}", "TXT")
    assert [rd.strings for rd in r.answer[0]] == [(b"hello world",)]


def test_long_txt_is_split_into_255_byte_strings(daemon):
    r = tcp(daemon, f"long.{ZONE}", "TXT")
    [rd] = r.answer[0]
    assert [len(s) for s in rd.strings] == [255, 255, 90]
    assert b"".join(rd.strings).decode() == LONG_TXT


# ---- wildcards, negative answers, zones -----------------------------------------------

def test_wildcard_answers_names_that_do_not_exist(daemon):
    for name in (f"nothing.{ZONE}", f"deep.er.{ZONE}"):
        r = udp(daemon, name)
        assert r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA
        assert values(r, dns.rdatatype.A) == ["10.0.0.99"]
        assert r.answer[0].name == dns.name.from_text(name)     # owner: the query name
    assert values(udp(daemon, f"x.wild.{ZONE}"), dns.rdatatype.A) == ["10.0.9.9"]


def test_a_name_with_records_is_not_wildcarded(daemon):
    assert values(udp(daemon, f"www.{ZONE}"), dns.rdatatype.A) == ["10.0.0.1", "10.0.0.2"]
    r = udp(daemon, f"ns1.{ZONE}", "TXT")                   # exists with A only: NODATA
    assert r.rcode() == dns.rcode.NOERROR and not r.answer
    authority_soa(r)
    # b.example.test exists (empty non-terminal): no wildcard for it, nor below it
    r = udp(daemon, f"b.{ZONE}")
    assert r.rcode() == dns.rcode.NOERROR and not r.answer
    assert udp(daemon, f"x.b.{ZONE}").rcode() == dns.rcode.NXDOMAIN


def test_nxdomain_and_nodata_carry_the_soa(daemon):
    # the wildcard zone answers everything, so NXDOMAIN is asked of the nested zone
    r = udp(daemon, f"nope.sub.{ZONE}")
    assert r.rcode() == dns.rcode.NXDOMAIN and r.flags & dns.flags.AA and not r.answer
    soa = authority_soa(r)
    assert soa.name == dns.name.from_text(f"sub.{ZONE}")
    assert soa.ttl == 600                       # min(SOA TTL 600, minimum 3600)
    r = udp(daemon, f"www.{ZONE}", "MX")        # the name exists, not the type
    assert r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA and not r.answer
    soa = authority_soa(r)
    assert soa.ttl == 120                       # min(SOA TTL 3600, minimum 120)
    r = udp(daemon, f"anything.{ZONE}", "TXT")  # wildcard match without the type
    assert r.rcode() == dns.rcode.NOERROR and not r.answer
    authority_soa(r)


def test_most_specific_zone_wins(daemon):
    r = udp(daemon, f"host.sub.{ZONE}")
    assert values(r, dns.rdatatype.A) == ["10.2.0.1"]
    r = udp(daemon, f"sub.{ZONE}", "SOA")
    assert r.answer[0][0].serial == 7


def test_names_outside_every_zone_are_refused(daemon):
    for name in ("example.org", "test", "."):
        r = udp(daemon, name)
        assert r.rcode() == dns.rcode.REFUSED
        assert not r.flags & dns.flags.AA and not r.answer


def test_any_gets_a_minimal_answer(daemon):
    r = udp(daemon, f"www.{ZONE}", "ANY")
    assert r.rcode() == dns.rcode.NOERROR
    assert [rrset.rdtype for rrset in r.answer] == [dns.rdatatype.A]     # RFC 8482
    r = tcp(daemon, f"www.{ZONE}", "ANY")       # over TCP: every RRset of the name
    assert sorted(rrset.rdtype for rrset in r.answer) == [dns.rdatatype.A,
                                                          dns.rdatatype.TXT]


def test_names_are_case_insensitive_and_the_case_is_echoed(daemon):
    udp(daemon, f"www.{ZONE}")                  # the lower-case answer is cached first
    for spelling in (f"WWW.{ZONE.upper()}", "wWw.ExAmPlE.tEsT"):
        r = udp(daemon, spelling)
        assert values(r, dns.rdatatype.A) == ["10.0.0.1", "10.0.0.2"]
        wire = r.to_wire()
        assert wire[12:12 + len(spelling) + 2] == dns.name.from_text(spelling).to_wire()
        assert r.answer[0].name.to_text() == spelling + "."
    r = tcp(daemon, "NoThInG.Example.Test")
    assert values(r, dns.rdatatype.A) == ["10.0.0.99"]


# ---- sizes: truncation, EDNS -----------------------------------------------------------

def test_big_answer_is_truncated_over_udp_and_complete_over_tcp(daemon):
    r = udp(daemon, f"many.{ZONE}")             # no EDNS: 512 bytes at most
    assert r.flags & dns.flags.TC and not r.answer and r.rcode() == dns.rcode.NOERROR
    assert len(r.to_wire()) <= 512
    r = tcp(daemon, f"many.{ZONE}")
    assert not r.flags & dns.flags.TC
    assert len(values(r, dns.rdatatype.A)) == MANY


def test_edns_payload_size_is_honoured(daemon):
    name = f"many.{ZONE}"                       # answer of ~ 1000 bytes
    r = udp(daemon, name, use_edns=0, payload=1232)
    assert not r.flags & dns.flags.TC and len(values(r, dns.rdatatype.A)) == MANY
    assert r.edns == 0 and r.payload == 1232    # OPT in the answer
    r = udp(daemon, name, use_edns=0, payload=700)
    assert r.flags & dns.flags.TC and not r.answer and r.edns == 0
    r = udp(daemon, f"long.{ZONE}", "TXT")      # 600+ bytes of TXT, no EDNS
    assert r.flags & dns.flags.TC and r.edns == -1
    r = udp(daemon, f"long.{ZONE}", "TXT", use_edns=0, payload=4096)
    assert not r.flags & dns.flags.TC and len(r.answer[0][0].strings) == 3


def test_edns_version_other_than_0_gets_badvers(daemon):
    r = udp(daemon, f"www.{ZONE}", use_edns=1)
    assert r.rcode() == dns.rcode.BADVERS and r.edns == 0


# ---- changes through the store ----------------------------------------------------------

def test_a_record_written_to_the_store_is_answered_within_a_second(daemon, store):
    domain = store.collection("dns_domains").find_one(name=ZONE)
    name = f"fresh.sub.{ZONE}"                  # not covered by a wildcard
    assert udp(daemon, name).rcode() == dns.rcode.NXDOMAIN      # cached negative answer
    sub = store.collection("dns_domains").find_one(name=f"sub.{ZONE}")
    written = time.perf_counter()
    add_record(store, sub, "A", "fresh", address="10.2.0.42")
    while True:
        r = udp(daemon, name)
        elapsed = time.perf_counter() - written
        if r.answer:
            break
        assert elapsed < 5, "the new record was not answered in 5 s"
        time.sleep(0.001)
    print(f"\nstore write -> first answer: {elapsed * 1000:.1f} ms")
    assert values(r, dns.rdatatype.A) == ["10.2.0.42"]
    assert elapsed < 1.0
    assert domain is not None


def test_disabled_records_are_not_served(daemon, store):
    r = udp(daemon, f"hidden.{ZONE}")           # disabled: only the wildcard answers
    assert values(r, dns.rdatatype.A) == ["10.0.0.99"]
    sub = store.collection("dns_domains").find_one(name=f"sub.{ZONE}")
    record = add_record(store, sub, "A", "toggle", address="10.2.0.5")
    name = f"toggle.sub.{ZONE}"
    wait_until(lambda: udp(daemon, name).answer)
    store.collection("dns_records").update(record["uuid"], {"disabled": True})
    wait_until(lambda: udp(daemon, name).rcode() == dns.rcode.NXDOMAIN)


def wait_until(predicate, timeout=2.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.005)


# ---- bad input -------------------------------------------------------------------------

def test_malformed_packets_do_not_kill_the_server(daemon):
    good = dns.message.make_query(f"www.{ZONE}", "A").to_wire()
    header = good[:12]
    bad = [
        b"",                                            # empty
        b"\x12",                                        # shorter than a header
        os.urandom(7),
        header,                                         # no question though QDCOUNT=1
        header + b"\x03www",                            # name cut short
        header + b"\xc0\x0c\x00\x01\x00\x01",           # pointer in the question (loop)
        header + b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01",   # label type 01
        header[:4] + b"\x00\x02" + header[6:] + good[12:],         # QDCOUNT=2
        good[:-2],                                      # qclass cut short
        good[:11] + b"\x05" + good[12:],                # ARCOUNT=5, no records
        bytes(range(256)) * 4,
    ]
    for packet in bad:
        reply = raw_udp(daemon, packet, timeout=0.2)
        if reply is not None:
            assert len(reply) >= 12
            assert reply[3] & 0xF in (dns.rcode.FORMERR, dns.rcode.NOERROR,
                                      dns.rcode.NXDOMAIN, dns.rcode.REFUSED)
    for _ in range(20):
        raw_udp(daemon, os.urandom(40), timeout=0.01)
    # a response (QR=1) gets no answer: no loops between servers
    assert raw_udp(daemon, good[:2] + b"\x81\x00" + good[4:], timeout=0.2) is None
    # over TCP: garbage on one connection, then a good query on another
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=2) as s:
        s.sendall(struct.pack("!H", 5) + b"\x00" * 5 + struct.pack("!H", 20) + os.urandom(20))
        s.settimeout(0.5)
        try:
            s.recv(100)
        except (socket.timeout, ConnectionResetError):
            pass
    assert daemon.proc.poll() is None
    assert values(udp(daemon, f"www.{ZONE}"), dns.rdatatype.A) == ["10.0.0.1", "10.0.0.2"]
    assert values(tcp(daemon, f"www.{ZONE}"), dns.rdatatype.A) == ["10.0.0.1", "10.0.0.2"]


def test_malformed_question_gets_formerr(daemon):
    good = dns.message.make_query(f"www.{ZONE}", "A").to_wire()
    reply = raw_udp(daemon, good[:12] + b"\xc0\x0c\x00\x01\x00\x01")
    assert reply[:2] == good[:2] and reply[2] & 0x80 and reply[3] & 0xF == dns.rcode.FORMERR


def test_other_opcodes_get_notimp(daemon):
    q = dns.message.make_query(f"www.{ZONE}", "A")
    q.set_opcode(dns.opcode.NOTIFY)
    r = dns.query.udp(q, "127.0.0.1", port=daemon.port, timeout=2)
    assert r.rcode() == dns.rcode.NOTIMP and r.opcode() == dns.opcode.NOTIFY


def test_several_pipelined_queries_on_one_tcp_connection(daemon):
    names = [f"www.{ZONE}", f"ns1.{ZONE}", f"nope.sub.{ZONE}"]
    queries = [dns.message.make_query(n, "A") for n in names]
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=2) as s:
        s.sendall(b"".join(struct.pack("!H", len(w)) + w
                           for w in (q.to_wire() for q in queries)))
        f = s.makefile("rb")
        answers = []
        for _ in queries:
            (length,) = struct.unpack("!H", f.read(2))
            answers.append(dns.message.from_wire(f.read(length)))
        # the connection stays open for more
        s.sendall(struct.pack("!H", len(queries[0].to_wire())) + queries[0].to_wire())
        (length,) = struct.unpack("!H", f.read(2))
        again = dns.message.from_wire(f.read(length))
    assert [a.id for a in answers] == [q.id for q in queries]
    assert values(answers[1], dns.rdatatype.A) == ["10.0.0.53"]
    assert answers[2].rcode() == dns.rcode.NXDOMAIN
    assert again.id == queries[0].id and again.answer


def test_zz_sigterm_stops_the_daemon_cleanly(daemon):
    t0 = time.monotonic()
    assert daemon.stop() == 0
    assert time.monotonic() - t0 < 3


# ---- pure: the zone index; in process: the portable loop --------------------------------

def _domain(uuid, name):
    return {"uuid": uuid, "name": name}


def _rec(domain, rtype, name, **data):
    return {"uuid": f"{domain}-{rtype}-{name}", "domain": domain, "type": rtype, "ttl": 60,
            "disabled": False, "record": {"kind": rtype, "name": name, **data}}


SOA_DATA = {"primary_dns": "ns1.z.test", "serial": 1, "refresh": 1, "retry": 1,
            "expire": 1, "ttl": 30}


def test_index_skips_bad_data_and_zones_without_soa():
    index = zones.ZoneIndex.build(
        [_domain("d1", "z.test"), _domain("d2", "nosoa.test"), _domain("d3", "Z.TEST."),
         _domain("d4", "bad..name")],
        [_rec("d1", "SOA", "@", **SOA_DATA), _rec("d1", "A", "ok", address="10.0.0.1"),
         _rec("d1", "A", "bad", address="300.1.1.1"), _rec("d1", "MX", "m"),
         _rec("d1", "SOA", "notapex", **SOA_DATA), _rec("d2", "A", "x", address="1.1.1.1")])
    assert list(index.zones) == [zones.to_wire("z.test")]
    text = "\n".join(index.problems)
    for expected in ("300.1.1.1", "MX", "apex", "no enabled SOA", "already served",
                     "unusable name"):
        assert expected in text


def test_delegation_gets_a_referral_with_glue():
    index = zones.ZoneIndex.build(
        [_domain("d1", "z.test")],
        [_rec("d1", "SOA", "@", **SOA_DATA), _rec("d1", "NS", "kid", content="ns.kid.z.test"),
         _rec("d1", "A", "ns.kid", address="10.9.9.9"), _rec("d1", "A", "*", address="1.2.3.4")])
    q = dns.message.make_query("www.kid.z.test", "A")
    r = dns.message.from_wire(zones.respond(index, q.to_wire()))
    assert r.rcode() == dns.rcode.NOERROR and not r.flags & dns.flags.AA and not r.answer
    assert r.authority[0].rdtype == dns.rdatatype.NS
    assert [rd.to_text() for rd in r.additional[0]] == ["10.9.9.9"]


def test_portable_loop_in_process():
    index = zones.ZoneIndex.build(
        [_domain("d1", "z.test")],
        [_rec("d1", "SOA", "@", **SOA_DATA), _rec("d1", "A", "www", address="10.0.0.1")])
    server = DNSServer("127.0.0.1", 0, index, batch=False).start()
    try:
        q = dns.message.make_query("WWW.z.test", "A")
        for _ in range(2):                      # a miss, then a cache hit
            r = dns.query.udp(q, "127.0.0.1", port=server.port, timeout=2)
            assert values(r, dns.rdatatype.A) == ["10.0.0.1"] and r.id == q.id
        server.set_index(zones.ZoneIndex())    # a zone change empties the cache
        r = dns.query.udp(q, "127.0.0.1", port=server.port, timeout=2)
        assert r.rcode() == dns.rcode.REFUSED
        r = dns.query.tcp(q, "127.0.0.1", port=server.port, timeout=2)
        assert r.rcode() == dns.rcode.REFUSED
    finally:
        server.stop()


def _small_index():
    return zones.ZoneIndex.build(
        [_domain("d1", "z.test")],
        [_rec("d1", "SOA", "@", **SOA_DATA), _rec("d1", "A", "www", address="10.0.0.1"),
         _rec("d1", "A", "*", address="10.0.0.2")])


def test_batch_loop_answers_every_sender_when_some_datagrams_are_dropped():
    """Datagrams that get no answer (here: responses, QR=1) in the middle of a
    recvmmsg batch must not shift the answers of the others to the wrong sender."""
    server = DNSServer("127.0.0.1", 0, _small_index(), batch=True).start()
    clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    try:
        expected = {i: [] for i in range(3)}
        packets = []
        for n in range(60):
            c = n % 3
            q = dns.message.make_query(f"h{n}.z.test", "A", id=1000 + n)
            wire = q.to_wire()
            if n % 4 == 1:
                wire = wire[:2] + bytes([wire[2] | 0x80]) + wire[3:]    # dropped
            else:
                expected[c].append(1000 + n)
            packets.append((c, wire))
        for c, wire in packets:                 # all at once: they share batches
            clients[c].sendto(wire, ("127.0.0.1", server.port))
        for c, ids in expected.items():
            clients[c].settimeout(2)
            got = []
            for _ in ids:
                r = dns.message.from_wire(clients[c].recv(4096))
                assert r.answer[0].name.to_text() == f"h{r.id - 1000}.z.test."
                got.append(r.id)
            assert sorted(got) == ids
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_idle_tcp_connections_are_closed(monkeypatch):
    from appliance.dns import server as server_module
    monkeypatch.setattr(server_module, "TCP_IDLE_SECONDS", 0.3)
    server = DNSServer("127.0.0.1", 0, _small_index()).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=3) as s:
            s.sendall(b"\x00\x30\x12")          # a partial message, then silence
            t0 = time.monotonic()
            assert s.recv(10) == b""            # closed by the server
            assert 0.25 < time.monotonic() - t0 < 2
    finally:
        server.stop()
