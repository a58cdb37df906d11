"""The DNS server's metrics (appliance/dns/server.py, docs/metrics-infra.md): real
queries over UDP and TCP on loopback, counted by question type, transport and response
code; read in-process through the registry's exposition, and from the real daemon
process through prometheus_client's multiprocess files."""

import socket
import time

import dns.message
import dns.query
import dns.rcode
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from appliance.dns import server as dns_server
from appliance.dns.server import DNSServer
from tests.apiserver import free_port
from tests.dns.test_server import ZONE, DNSDaemon, _small_index, add_domain, add_record
from tests.metrics_reading import value
from state import Store


def count(metric, registry=None, **labels):
    kw = {} if registry is None else {"registry": registry}
    return value(metric, **kw, **labels) or 0


def eventually(predicate, timeout=5.0, message=lambda: "the counters never reached it"):
    """The loop hands its tally over after it has sent the answer: wait for it."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, message()
        time.sleep(0.01)


@pytest.mark.parametrize("batch", [True, False], ids=["recvmmsg", "recvfrom"])
def test_queries_and_answers_are_counted_by_qtype_transport_rcode(batch):
    server = DNSServer("127.0.0.1", 0, _small_index(), batch=batch).start()
    try:
        before = {
            "a_udp": count("appliance_dns_queries_total", qtype="A", transport="udp"),
            "txt_tcp": count("appliance_dns_queries_total", qtype="TXT", transport="tcp"),
            "mx_udp": count("appliance_dns_queries_total", qtype="MX", transport="udp"),
            "none_udp": count("appliance_dns_queries_total", qtype="none",
                              transport="udp"),
            "ok_udp": count("appliance_dns_answers_total", rcode="NOERROR",
                            transport="udp"),
            "refused_udp": count("appliance_dns_answers_total", rcode="REFUSED",
                                 transport="udp"),
            "ok_tcp": count("appliance_dns_answers_total", rcode="NOERROR",
                            transport="tcp"),
        }
        for _ in range(3):          # a miss, then cache hits: all counted
            r = dns.query.udp(dns.message.make_query("www.z.test", "A"), "127.0.0.1",
                              port=server.port, timeout=2)
            assert r.rcode() == dns.rcode.NOERROR and r.answer
        r = dns.query.udp(dns.message.make_query("Www.Z.test", "MX"), "127.0.0.1",
                          port=server.port, timeout=2)
        assert r.rcode() == dns.rcode.NOERROR and not r.answer      # no data
        for _ in range(2):
            r = dns.query.udp(dns.message.make_query("elsewhere.example", "A"),
                              "127.0.0.1", port=server.port, timeout=2)
            assert r.rcode() == dns.rcode.REFUSED
        r = dns.query.tcp(dns.message.make_query("www.z.test", "TXT"), "127.0.0.1",
                          port=server.port, timeout=2)
        assert r.rcode() == dns.rcode.NOERROR
        # a response (QR=1) sent to the server gets no answer: a query of no question type
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(dns.message.make_response(
                dns.message.make_query("www.z.test", "A")).to_wire(),
                ("127.0.0.1", server.port))
        after = {
            "a_udp": 5, "mx_udp": 1, "txt_tcp": 1, "none_udp": 1,  # A: 3 answered, 2 refused
            "ok_udp": 4, "refused_udp": 2, "ok_tcp": 1,
        }
        names = {"a_udp": ("appliance_dns_queries_total", "A", "udp"),
                 "txt_tcp": ("appliance_dns_queries_total", "TXT", "tcp"),
                 "mx_udp": ("appliance_dns_queries_total", "MX", "udp"),
                 "none_udp": ("appliance_dns_queries_total", "none", "udp"),
                 "ok_udp": ("appliance_dns_answers_total", "NOERROR", "udp"),
                 "refused_udp": ("appliance_dns_answers_total", "REFUSED", "udp"),
                 "ok_tcp": ("appliance_dns_answers_total", "NOERROR", "tcp")}

        def now():
            out = {}
            for key, (metric, label, transport) in names.items():
                field = "qtype" if metric.endswith("queries_total") else "rcode"
                out[key] = count(metric, **{field: label, "transport": transport}) - \
                    before[key]
            return out
        eventually(lambda: now() == after, message=lambda: repr(sorted(now().items())))
    finally:
        server.stop()


def test_query_names_never_become_labels():
    """A flood of random names and odd types adds no label value: types outside the fixed
    table count as "other", names are never labels."""
    server = DNSServer("127.0.0.1", 0, _small_index()).start()
    try:
        before = count("appliance_dns_queries_total", qtype="other", transport="udp")
        for i in range(5):
            q = dns.message.make_query(f"r{i}-x.z.test", 65280 + i)     # private-use types
            dns.query.udp(q, "127.0.0.1", port=server.port, timeout=2)
        eventually(lambda: count("appliance_dns_queries_total", qtype="other",
                                 transport="udp") == before + 5)
        from tests.metrics_reading import samples
        labels = {tuple(sorted(lab.items())) for lab, _ in
                  samples("appliance_dns_queries_total")}
        assert all("r0-x" not in str(lab) for lab in labels)
        qtypes = {dict(lab)["qtype"] for lab in labels}
        assert qtypes <= set(dns_server._QTYPES.values()) | {"other", "none"}
    finally:
        server.stop()


def test_stat_of_reads_qtype_and_rcode_from_the_answer():
    q = dns.message.make_query("www.z.test", "AAAA")
    reply = dns.message.make_response(q)
    reply.set_rcode(dns.rcode.NXDOMAIN)
    assert dns_server.stat_of(reply.to_wire()[2:]) == ("AAAA", "NXDOMAIN")
    assert dns_server.stat_of(dns.message.Message().to_wire()[2:]) == ("none", "NOERROR")


def test_daemon_process_writes_multiprocess_files(tmp_path, monkeypatch):
    """The daemon (python -m daemons.dns) with PROMETHEUS_MULTIPROC_DIR set, as the
    platform runs it: another process reads its counters from the files."""
    st = Store(str(tmp_path / "state"))
    d = add_domain(st, ZONE)
    add_record(st, d, "SOA", "@", ttl=3600, minimum=120)
    add_record(st, d, "A", "www", address="10.0.0.1")
    st.close()
    prom = tmp_path / "prom"
    prom.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(prom))
    daemon = DNSDaemon(str(tmp_path / "state"), free_port()).start()
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                r = dns.query.udp(dns.message.make_query(f"www.{ZONE}", "A"), "127.0.0.1",
                                  port=daemon.port, timeout=0.2)
                if r.answer:
                    break
            except (dns.exception.Timeout, OSError):
                pass
            assert daemon.proc.poll() is None, "the DNS daemon exited"
            assert time.monotonic() < deadline, "the DNS daemon did not answer in 10 s"
        dns.query.tcp(dns.message.make_query(f"nope.{ZONE}", "A"), "127.0.0.1",
                      port=daemon.port, timeout=2)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(prom))
        eventually(lambda: count("appliance_dns_answers_total", registry, rcode="NXDOMAIN",
                                 transport="tcp") == 1)
        assert count("appliance_dns_queries_total", registry, qtype="A",
                     transport="udp") >= 1
        assert count("appliance_dns_answers_total", registry, rcode="NOERROR",
                     transport="udp") >= 1
    finally:
        daemon.stop()
