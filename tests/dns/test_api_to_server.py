"""End to end: records made through the API are answered by the running DNS daemon."""

import time

import dns.message
import dns.query
import dns.rcode
import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from tests.apiserver import ApiServer, free_port
from tests.conftest import ADMIN_PASSWORD

from .test_server import DNSDaemon


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    daemon = DNSDaemon(srv.settings["state_dir"], free_port()).start()
    yield srv, daemon
    daemon.stop()
    srv.stop()


def ask(port, name, rtype="A"):
    query = dns.message.make_query(name, rtype)
    return dns.query.udp(query, "127.0.0.1", port=port, timeout=1)


def wait_answer(port, name, rtype, predicate, timeout=5.0):
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            response = ask(port, name, rtype)
            if predicate(response):
                return time.monotonic() - started
        except dns.exception.Timeout:
            pass
        time.sleep(0.005)
    raise AssertionError(f"{name} {rtype} not answered as expected in {timeout} s")


def test_api_changes_are_answered_within_a_second(world):
    srv, daemon = world
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    domain = admin.post("/v1/dns/domains", {"name": "e2e.test",
                                            "project_id": ADMIN_PROJECT}).json
    wait_answer(daemon.port, "e2e.test", "SOA", lambda r: r.rcode() == dns.rcode.NOERROR)
    records = f"/v1/dns/domains/{domain['uuid']}/records"
    started = time.monotonic()
    made = admin.post(records, {"type": "A", "record": {"kind": "A", "name": "www",
                                                        "address": "10.20.0.9"}}).json
    elapsed = wait_answer(daemon.port, "www.e2e.test", "A",
                          lambda r: any("10.20.0.9" in str(rr) for rr in r.answer))
    total = time.monotonic() - started
    print(f"API create -> answered: {total * 1000:.1f} ms")
    assert total < 1.0
    admin.put(f"{records}/{made['uuid']}", {"record": {"kind": "A", "name": "www",
                                                       "address": "10.20.0.10"}})
    wait_answer(daemon.port, "www.e2e.test", "A",
                lambda r: any("10.20.0.10" in str(rr) for rr in r.answer), timeout=1.0)
    admin.delete(f"{records}/{made['uuid']}")
    wait_answer(daemon.port, "www.e2e.test", "A",
                lambda r: r.rcode() == dns.rcode.NXDOMAIN, timeout=1.0)
    # the serial the server gives is the one the API keeps
    soa = [r for r in admin.get(records).json if r["type"] == "SOA"][0]
    answer = ask(daemon.port, "e2e.test", "SOA")
    assert str(soa["record"]["serial"]) in str(answer.answer[0])
    assert elapsed < 1.0


def test_an_acme_challenge_with_ttl_0_is_served_with_ttl_0(world):
    # ACME clients (the reference's certificate driver among them) publish TXT challenges
    # with ttl 0 so that no resolver caches them
    srv, daemon = world
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    domain = admin.post("/v1/dns/domains", {"name": "acme.test",
                                            "project_id": ADMIN_PROJECT}).json
    records = f"/v1/dns/domains/{domain['uuid']}/records"
    made = admin.post(records, {"type": "TXT", "ttl": 0, "record": {
        "kind": "TXT", "name": "_acme-challenge", "content": "token-123"}})
    assert made.status == 201 and made.json["ttl"] == 0, made
    wait_answer(daemon.port, "_acme-challenge.acme.test", "TXT",
                lambda r: any("token-123" in str(rr) for rr in r.answer))
    answer = ask(daemon.port, "_acme-challenge.acme.test", "TXT")
    assert [rrset.ttl for rrset in answer.answer] == [0]
    longest = admin.put(f"{records}/{made.json['uuid']}", {"ttl": 2 ** 31 - 1})
    assert longest.status == 200 and longest.json["ttl"] == 2 ** 31 - 1
    too_long = admin.put(f"{records}/{made.json['uuid']}", {"ttl": 2 ** 31})
    assert too_long.status == 400 and "ttl" in too_long.json["message"]
    assert admin.get(f"{records}/{made.json['uuid']}").json["ttl"] == 2 ** 31 - 1
