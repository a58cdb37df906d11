"""The answer the built-in DNS server gives for a name, asked through the API (the
console's "what does the server say", `appliance dns domain resolve`).

The API asks the running server itself (one real query to `dns_host`:`dns_port`, UDP,
again over TCP when the answer is truncated) rather than computing an answer from the
store: the point is to see what clients get, including what the daemon has not yet
loaded. Which names a caller may ask is the tenant rule of appliance/tenancy/zones.py
(`resolve_refusal`).
"""

import ipaddress
import re
import socket
import struct
import time

from appliance.api.errors import ApiError, BadRequest
from appliance.tenancy import zones as zone_rule

# what a client would ask of this server; ANY and zone transfers are left out
TYPES = ("A", "AAAA", "CNAME", "MX", "NS", "SOA", "SRV", "TXT", "CAA", "PTR")
TIMEOUT_SECONDS = 2.0
_LABEL = r"(?!-)[A-Za-z0-9_*-]{1,63}(?<!-)"
NAME = re.compile(rf"^(?=.{{1,253}}\.?$){_LABEL}(\.{_LABEL})*\.?$")

PARAMETERS = [
    {"name": "name", "in": "query", "required": True,
     "description": "the full name to ask, inside the domain (www.example.test)",
     "schema": {"type": "string", "maxLength": 254}},
    {"name": "type", "in": "query", "required": False,
     "description": "the record type asked (default A)",
     "schema": {"enum": list(TYPES), "default": "A"}},
]
_RR = {"type": "object", "properties": {
    "name": {"type": "string"}, "type": {"type": "string"}, "ttl": {"type": "integer"},
    "data": {"type": "string"}}}
RESPONSE_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "type": {"type": "string"},
    "server": {"type": "string", "description": "host:port asked"},
    "transport": {"enum": ["udp", "tcp"]},
    "rcode": {"type": "string", "description": "NOERROR, NXDOMAIN, REFUSED, ..."},
    "authoritative": {"type": "boolean"},
    "answer": {"type": "array", "items": _RR},
    "authority": {"type": "array", "items": _RR},
    "elapsed_ms": {"type": "number"}}}


class Unreachable(ApiError):
    status, type = 503, "ServiceUnavailable"


def query_params(call):
    """(name, type) of the query string, checked; BadRequest names the bad one."""
    names = call.query.getall("name")
    if len(names) != 1 or not names[0]:
        raise BadRequest("name: give the one full name to ask, e.g. ?name=www.example.test")
    name = names[0].strip()
    if not NAME.match(name):
        raise BadRequest(f"name: {name[:80]!r} is not a DNS name (labels of letters, "
                         "digits, '-', '_' or '*', 253 characters at most)")
    types = call.query.getall("type") or ["A"]
    rtype = types[0].upper()
    if len(types) != 1 or rtype not in TYPES:
        raise BadRequest(f"type: one of {', '.join(TYPES)}")
    return zone_rule.normal(name), rtype


def server_address(settings):
    """Where the API reaches the server: its own address, or loopback when it listens on
    every address."""
    host = str(settings.get("dns_host") or "127.0.0.1")
    try:
        if ipaddress.ip_address(host).is_unspecified:
            host = "::1" if ":" in host else "127.0.0.1"
    except ValueError:
        host = "127.0.0.1"
    return host, int(settings["dns_port"])


def resolve(call, domain):
    import dnslib  # noqa: PLC0415 (only a resolve needs it: the API process loads no dnslib)
    name, rtype = query_params(call)
    why = zone_rule.resolve_refusal(domain, name, call.store.collection("dns_domains")
                                    .records())
    if why:
        raise BadRequest(f"name: {why}")
    host, port = server_address(call.api.settings)
    question = dnslib.DNSRecord.question(name, rtype)
    question.header.rd = 0
    started = time.perf_counter()
    transport = "udp"
    try:
        reply = _ask_udp(question, host, port)
        if reply.header.tc:
            transport, reply = "tcp", _ask_tcp(question, host, port)
    except (OSError, dnslib.DNSError, struct.error) as e:
        raise Unreachable(f"the built-in DNS server at {host}:{port} did not answer "
                          f"({e.__class__.__name__}: {e}); check the dns daemon's state "
                          "(GET /v1/system/daemons) and try again") from None
    elapsed = (time.perf_counter() - started) * 1000
    return {"name": name, "type": rtype, "server": f"{host}:{port}",
            "transport": transport, "rcode": dnslib.RCODE.get(reply.header.rcode),
            "authoritative": bool(reply.header.aa),
            "answer": [_rr(rr) for rr in reply.rr],
            "authority": [_rr(rr) for rr in reply.auth],
            "elapsed_ms": round(elapsed, 3)}


def _rr(rr):
    import dnslib  # noqa: PLC0415 (only a resolve needs it: the API process loads no dnslib)
    return {"name": str(rr.rname).rstrip(".") or ".", "type": dnslib.QTYPE.get(rr.rtype),
            "ttl": rr.ttl, "data": rr.rdata.toZone()}


def _family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _ask_udp(question, host, port):
    import dnslib  # noqa: PLC0415 (only a resolve needs it: the API process loads no dnslib)
    packet = question.pack()
    with socket.socket(_family(host), socket.SOCK_DGRAM) as sock:
        sock.settimeout(TIMEOUT_SECONDS)
        sock.connect((host, port))
        sock.send(packet)
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while True:
            reply = dnslib.DNSRecord.parse(sock.recv(65535))
            # a late answer to an earlier query on a reused port is not ours
            if reply.header.id == question.header.id:
                return reply
            sock.settimeout(max(0.01, deadline - time.monotonic()))


def _ask_tcp(question, host, port):
    import dnslib  # noqa: PLC0415 (only a resolve needs it: the API process loads no dnslib)
    packet = question.pack()
    with socket.create_connection((host, port), timeout=TIMEOUT_SECONDS) as sock:
        sock.sendall(struct.pack("!H", len(packet)) + packet)
        length = struct.unpack("!H", _read(sock, 2))[0]
        return dnslib.DNSRecord.parse(_read(sock, length))


def _read(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection mid-answer")
        data += chunk
    return data
