"""What the LB data-plane tests share: a node (a real Host on a temporary root, the real
Driver, a loopback address of its own), real backends (Waitress HTTP, TCP and UDP echo
servers on 127.0.0.1), LB item values, and plain clients.

Each node listens on a random 127.x.y.z (the `agent_lb_listen` setting), so tests and other
processes on this host never contend for a port.
"""

import datetime
import http.client
import random
import socket
import socketserver
import threading
import uuid

import pytest

from appliance.agent.host import Host
from appliance.lb.node import Driver
from tests.nginx import require_nginx
from tests.wsgiserver import LoopbackServer
from tests import ports


def new_uuid():
    return str(uuid.uuid4())


def loopback_address():
    return f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.{random.randint(2, 254)}"


def free_port(address, kind=socket.SOCK_STREAM):
    return ports.free_port(address, kind)


class Node:
    """One LB node: Host on `base/root`, the driver, its listen address."""

    def __init__(self, base, address=None):
        self.base = base
        self.address = address or loopback_address()
        self.host = Host(root=str(base / "root"), state_dir=str(base / "state"),
                         settings={"agent_lb_listen": self.address})
        (base / "root").mkdir(parents=True, exist_ok=True)
        self.driver = Driver(self.host)

    def port(self, kind=socket.SOCK_STREAM):
        return free_port(self.address, kind)

    def apply(self, value, applied=None):
        return self.driver.apply(item(value), applied)

    def restart_agent(self):
        """A new driver, as after an agent restart (nginx is left running)."""
        self.driver = Driver(self.host)
        return self.driver

    def file(self, path):
        return self.host.path(path)


@pytest.fixture
def node(tmp_path):
    require_nginx("http_auth_request_module", "http_dav_module", "stream")
    n = Node(tmp_path / "node")
    yield n
    n.driver.stop_instance(grace=1)


def item(value):
    return {"uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, value["lb"])),
            "kind": "lb", "master": value["lb"], "master_kind": "network_lb",
            "value": value}


# ---- LB values (the contract's V) ----------------------------------------------------------

def pool(*endpoints, weight=1):
    return {"balance": "roundrobin",
            "endpoints": [{"host": "127.0.0.1", "port": p, "weight": weight}
                          for p in endpoints]}


def route(kind="prefix", value="/", pool_uuid=None, actions=None, modifiers=None,
          allowed_ips=None):
    c = {"kind": kind}
    if kind != "raw":
        c["value"] = value
        c["modifiers"] = modifiers if modifiers is not None else [
            {"kind": "auto_header", "headers": ["Host", "X-Forwarded-For",
                                                "X-Forwarded-Port", "X-Forwarded-Proto"]}]
    c["actions"] = actions or [{"kind": "backend", "pool": pool_uuid,
                                **({} if kind == "raw" else
                                   {"protocol": {"kind": "http"}})}]
    c["allowed_ips"] = allowed_ips or ["0.0.0.0/0"]
    return {"uuid": new_uuid(), "condition": c}


def vhost(protocol, port, routes, domains=None, tls=None, **more):
    return {"uuid": new_uuid(), "protocol": protocol, "port": port,
            "domains": domains if domains is not None else (
                ["_"] if protocol in ("http", "https") else None),
            "tls": tls, "redirect_http": False, "proxy_protocol_from": None,
            "routes": routes, **more}


def lb_value(vhosts, pools, lb=None):
    return {"lb": lb or new_uuid(), "vhosts": vhosts, "pools": pools}


def one_route(node, *backends):
    """(value, port, pool uuid): one http vhost on a free port of `node`, its one route "/"
    to a pool of `backends`."""
    p = new_uuid()
    port = node.port()
    return lb_value([vhost("http", port, [route(pool_uuid=p)])],
                    {p: pool(*(b.port for b in backends))}), port, p


# ---- backends --------------------------------------------------------------------------------

class Backend:
    """A Waitress HTTP server answering `<name> <path>` to every request, keeping the
    headers of each request it got."""

    def __init__(self, name, status=200):
        self.name, self.status = name, status
        self.requests = []
        # waitress would drop the X-Forwarded-* headers that the tests look at
        self.server = LoopbackServer(self.app, threads=8,
                                     clear_untrusted_proxy_headers=False).start()
        self.port = int(self.server.port)

    def app(self, environ, start_response):
        self.requests.append({k: v for k, v in environ.items()
                              if k.startswith("HTTP_") or k in ("PATH_INFO",
                                                                "REQUEST_METHOD")})
        body = f"{self.name} {environ.get('PATH_INFO')}".encode()
        start_response(f"{self.status} X", [("Content-Type", "text/plain"),
                                             ("Content-Length", str(len(body)))])
        return [body]

    def stop(self):
        self.server.stop()


@pytest.fixture
def backends():
    made = []

    def make(name, status=200):
        b = Backend(name, status)
        made.append(b)
        return b
    yield make
    for b in made:
        b.stop()


class TcpEcho:
    """Answers each line with `<name>:<line>`."""

    def __init__(self, name):
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                for line in self.rfile:
                    self.wfile.write(f"{outer.name}:".encode() + line)

        self.name = name
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class UdpEcho:
    """Answers each datagram with `<name>:<datagram>`."""

    def __init__(self, name):
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                data, sock = self.request
                sock.sendto(f"{outer.name}:".encode() + data, self.client_address)

        self.name = name
        self.server = socketserver.ThreadingUDPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


# ---- clients ---------------------------------------------------------------------------------

def get(address, port, path="/", host="lb.test", method="GET", headers=None, body=None,
        context=None, timeout=10):
    """(status, headers, body) of one request on a fresh connection."""
    if context is not None:
        conn = http.client.HTTPSConnection(address, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Host": host, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


# ---- certificates ------------------------------------------------------------------------------

def make_ca():
    """(CA key, CA certificate), made with cryptography."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test LB CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def issue(ca, *names):
    """{"crt": PEM chain, "key": PEM} for `names`, signed by `ca`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return {"crt": cert.public_bytes(pem).decode(),
            "key": key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode()}


def ca_pem(ca):
    from cryptography.hazmat.primitives import serialization
    return ca[1].public_bytes(serialization.Encoding.PEM).decode()
