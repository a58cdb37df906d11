"""Must-shows against a real nginx driven by the LB driver: round robin, prefix routing,
TCP and UDP, HTTPS with SNI (docs/lb-dataplane.md)."""

import collections
import os
import socket
import ssl
import stat

from tests.lb.nginxnode import (TcpEcho, UdpEcho, backends, ca_pem, get, issue,  # noqa: F401
                                lb_value, make_ca, new_uuid, node, one_route, pool, route,
                                vhost)


def test_round_robin_over_three_backends_with_weights(node, backends):
    a, b, c = backends("a"), backends("b"), backends("c")
    value, port, p = one_route(node, a, b, c)
    assert node.apply(value)["status"] == "ACTIVE"
    seen = collections.Counter(get(node.address, port)[2].split()[0] for _ in range(30))
    assert seen == {b"a": 10, b"b": 10, b"c": 10}

    value["pools"][p]["endpoints"][0]["weight"] = 3
    value["pools"][p]["endpoints"][2]["weight"] = 0          # weight 0: no traffic
    assert node.apply(value)["status"] == "ACTIVE"
    seen = collections.Counter(get(node.address, port)[2].split()[0] for _ in range(40))
    assert seen == {b"a": 30, b"b": 10}


def test_prefix_exact_and_regex_routing(node, backends):
    api, web, exact = backends("api"), backends("web"), backends("exact")
    pa, pw, pe = new_uuid(), new_uuid(), new_uuid()
    port = node.port()
    value = lb_value([vhost("http", port, [
        route("prefix", "/api/", pa),
        route("prefix", "/", pw),
        route("exact", "/health", pe),
        route("regex", r"^/img/[a-z]+\.png$", pe),
    ])], {pa: pool(api.port), pw: pool(web.port), pe: pool(exact.port)})
    assert node.apply(value)["status"] == "ACTIVE"
    assert get(node.address, port, "/api/v1/x")[2] == b"api /api/v1/x"
    assert get(node.address, port, "/apix")[2] == b"web /apix"
    assert get(node.address, port, "/health")[2] == b"exact /health"
    assert get(node.address, port, "/health/more")[2] == b"web /health/more"
    assert get(node.address, port, "/img/cat.png")[2] == b"exact /img/cat.png"
    assert get(node.address, port, "/img/Cat.png")[2] == b"web /img/Cat.png"
    # what the auto headers carried
    sent = api.requests[0]
    assert sent["HTTP_HOST"] == "lb.test"
    assert sent["HTTP_X_FORWARDED_PORT"] == str(port)
    assert sent["HTTP_X_FORWARDED_PROTO"] == "http"
    assert sent["HTTP_X_FORWARDED_FOR"] == "127.0.0.1"


def test_no_route_answers_404_and_an_empty_pool_502(node, backends):
    empty = new_uuid()
    port = node.port()
    value = lb_value([vhost("http", port, [route("prefix", "/void/", empty)])],
                     {empty: {"balance": "roundrobin", "endpoints": []}})
    assert node.apply(value)["status"] == "ACTIVE"
    assert get(node.address, port, "/other")[0] == 404
    assert get(node.address, port, "/void/x")[0] == 502


def test_allowed_ips_per_route(node, backends):
    a = backends("a")
    p = new_uuid()
    port = node.port()
    value = lb_value([vhost("http", port, [
        route("prefix", "/open/", p),
        route("prefix", "/closed/", p, allowed_ips=["10.0.0.0/8"]),
    ])], {p: pool(a.port)})
    assert node.apply(value)["status"] == "ACTIVE"
    assert get(node.address, port, "/open/x")[0] == 200
    assert get(node.address, port, "/closed/x")[0] == 403


def test_tcp_and_udp(node):
    t1, t2, u1 = TcpEcho("t1"), TcpEcho("t2"), UdpEcho("u1")
    try:
        pt, pu = new_uuid(), new_uuid()
        port = node.port()
        udp_port = node.port(socket.SOCK_DGRAM)
        value = lb_value([vhost("tcp", port, [route("raw", pool_uuid=pt)]),
                          vhost("udp", udp_port, [route("raw", pool_uuid=pu)])],
                         {pt: pool(t1.port, t2.port), pu: pool(u1.port)})
        result = node.apply(value)
        assert result["status"] == "ACTIVE", result
        answers = set()
        for _ in range(4):
            with socket.create_connection((node.address, port), timeout=5) as s:
                s.sendall(b"hello\n")
                answers.add(s.makefile("rb").readline())
        assert answers == {b"t1:hello\n", b"t2:hello\n"}
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            s.sendto(b"ping", (node.address, udp_port))
            assert s.recvfrom(100)[0] == b"u1:ping"
    finally:
        for server in (t1, t2, u1):
            server.stop()


def tls_request(address, port, name, ctx, path="/"):
    """(TLS version, the certificate's names, the whole reply) of one GET with SNI `name`."""
    with socket.create_connection((address, port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=name) as tls:
        names = tls.getpeercert()["subjectAltName"]
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n"
                    .encode())
        reply = b"".join(iter(lambda: tls.recv(4096), b""))
        return tls.version(), names, reply


def test_https_with_sni_per_vhost_and_redirect(node, backends):
    one, two = backends("one"), backends("two")
    p1, p2 = new_uuid(), new_uuid()
    ca = make_ca()
    port = node.port()
    v1 = vhost("https", port, [route(pool_uuid=p1)], domains=["one.test"],
               tls=issue(ca, "one.test"), redirect_http=True)
    v2 = vhost("https", port, [route(pool_uuid=p2)], domains=["two.test"],
               tls=issue(ca, "two.test"))
    value = lb_value([v1, v2], {p1: pool(one.port), p2: pool(two.port)})
    result = node.apply(value)
    assert result["status"] == "ACTIVE", result

    ctx = ssl.create_default_context(cadata=ca_pem(ca))
    for name, body in (("one.test", b"one /"), ("two.test", b"two /")):
        # each name gets its own certificate (SNI), which the CA vouches for
        version, names, reply = tls_request(node.address, port, name, ctx)
        assert names == (("DNS", name),)
        assert version in ("TLSv1.2", "TLSv1.3")
        assert reply.endswith(body), reply
    assert one.requests[-1]["HTTP_X_FORWARDED_PROTO"] == "https"

    old = ssl.create_default_context(cadata=ca_pem(ca))
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    assert tls_request(node.address, port, "one.test", old)[0] == "TLSv1.2"

    # redirect_http: port 80 answers 301 to the https vhost
    status, headers, _ = get(node.address, 80, "/a?b=c", host="one.test")
    assert (status, headers["location"]) == (301, f"https://one.test:{port}/a?b=c")

    # the certificate files: mode 0600, their content not in the rendered text
    live = node.driver.live_generation()
    key = os.path.join(live, "certs", value["lb"], f"{v1['uuid']}.key")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(key.replace(".key", ".crt")).st_mode) == 0o600
    conf = open(os.path.join(live, f"lb-{value['lb']}.http.conf")).read()
    assert "PRIVATE KEY" not in conf and "BEGIN CERTIFICATE" not in conf


def test_proxy_protocol_from_gives_the_real_client_address(node, backends):
    a = backends("a")
    p = new_uuid()
    port = node.port()
    value = lb_value([vhost("http", port, [route("prefix", "/", p,
                                                 allowed_ips=["203.0.113.0/24"])],
                            proxy_protocol_from="127.0.0.0/8")], {p: pool(a.port)})
    assert node.apply(value)["status"] == "ACTIVE"

    def send(client_ip):
        with socket.create_connection((node.address, port), timeout=5) as s:
            s.sendall(f"PROXY TCP4 {client_ip} 10.0.0.1 5555 {port}\r\n".encode()
                      + b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return b"".join(iter(lambda: s.recv(4096), b""))
    assert send("203.0.113.7").startswith(b"HTTP/1.1 200")
    assert a.requests[-1]["HTTP_X_FORWARDED_FOR"] == "203.0.113.7"
    # allowed_ips sees the client the proxy speaks for, not the proxy
    assert send("198.51.100.1").startswith(b"HTTP/1.1 403")


def test_an_https_backend_verified_or_not(node, backends):
    """The backend is the node's own https vhost (a certificate of a test CA): with
    verify the system CAs refuse it (502), without verify it is reached."""
    a = backends("a")
    pa, ptls = new_uuid(), new_uuid()
    tls_port, port = node.port(), node.port()
    inner = lb_value([vhost("https", tls_port, [route(pool_uuid=pa)], domains=["in.test"],
                            tls=issue(make_ca(), "in.test"))], {pa: pool(a.port)})
    assert node.apply(inner)["status"] == "ACTIVE"
    outer_route = route(pool_uuid=ptls)
    outer = lb_value([vhost("http", port, [outer_route])], {ptls: {
        "balance": "roundrobin",
        "endpoints": [{"host": node.address, "port": tls_port, "weight": 1}]}})
    outer_route["condition"]["actions"][0]["protocol"] = {"kind": "https", "verify": True}
    assert node.apply(outer)["status"] == "ACTIVE"
    assert get(node.address, port, host="in.test")[0] == 502
    outer_route["condition"]["actions"][0]["protocol"] = {"kind": "https", "verify": False}
    assert node.apply(outer)["status"] == "ACTIVE"
    assert get(node.address, port, host="in.test")[2] == b"a /"
