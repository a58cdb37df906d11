"""Bodies and records for the LB tests."""

import datetime
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from appliance.agent.credentials import issue_credential
from appliance.firstboot.register import register_self
from tests.compute.conftest import created
from tests.iam.helpers import ADMIN_PROJECT

LB = "/v1/network/lb"
NODES = "/v1/compute/nodes"
APPLIANCE_IP = "192.0.2.10"


def register_appliance(store):
    """The appliance's own node and agent, as first boot registers and enrolls them."""
    node, _ = register_self(store, "appliance-host", {"ipv4": APPLIANCE_IP}, 2, 2048)
    issue_credential(store, node["uuid"], name="appliance")
    return node


def hw_node(client, project=ADMIN_PROJECT, ipv4=None, store=None):
    node = created(client.post(NODES, {"name": f"hw-{uuid.uuid4().hex[:8]}",
                                       "project_id": project, "cores": 1, "ram": 1024,
                                       "node_type": "HW"}))
    if ipv4:
        node = set_address(store, node["uuid"], ipv4)
    return node


def set_address(store, node_uuid, ipv4):
    """What the network step does when a node gets its port."""
    return store.collection("compute_nodes").update(node_uuid, {"default_network": {
        "ipv4": ipv4}})


def make_lb(client, project=ADMIN_PROJECT, **fields):
    return created(client.post(LB, {"name": f"lb-{uuid.uuid4().hex[:8]}",
                                    "project_id": project, **fields}))


def external(node):
    return {"kind": "external_node", "external_node": node["uuid"]}


def vhosts(lb):
    return f"{LB}/{lb['uuid']}/vhosts"


def pools(lb):
    return f"{LB}/{lb['uuid']}/backend_pools"


def routes(lb, vhost):
    return f"{LB}/{lb['uuid']}/vhosts/{vhost['uuid']}/routes"


def make_pool(client, lb, endpoints=None, **fields):
    endpoints = endpoints or [{"kind": "host", "host": "10.0.0.5", "port": 8080}]
    return created(client.post(pools(lb), {"endpoints": endpoints, **fields}))


def make_vhost(client, lb, protocol="http", port=None, **fields):
    body = {"protocol": protocol, "port": port or free_port_hint(), **fields}
    if protocol in ("http", "https"):
        body.setdefault("domains", [f"{uuid.uuid4().hex[:8]}.example.test"])
    return created(client.post(vhosts(lb), body))


_NEXT = [20000]


def free_port_hint():
    """A port no other vhost of the module has taken (port rules are not these tests')."""
    _NEXT[0] += 1
    return _NEXT[0]


def backend(pool, **extra):
    return {"kind": "backend", "pool": pool["uuid"], **extra}


def prefix(pool, value="/", **extra):
    return {"kind": "prefix", "value": value, "actions": [backend(pool)], **extra}


def make_route(client, lb, vhost, condition, **fields):
    return created(client.post(routes(lb, vhost), {"condition": condition, **fields}))


def pem_pair(name="a.example.test"):
    """(crt, key) PEM of a fresh self-signed certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=2))
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM).decode(),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()).decode())


def raw_cert(name="a.example.test"):
    crt, key = pem_pair(name)
    return {"kind": "raw", "crt": crt, "key": key}


def certificate_record(store, project=ADMIN_PROJECT, issued=True):
    """A record of kind secret_certificates as the acme helper's resource stores it: the
    key sealed, the chain plain (null until issued)."""
    from appliance.secret.crypto import SecretBox
    crt, key = pem_pair()
    record_uuid = str(uuid.uuid4())
    box = SecretBox(store)
    return store.collection("secret_certificates").insert({
        "uuid": record_uuid, "name": f"c-{record_uuid[:8]}", "project_id": project,
        "domains": ["a.example.test"],
        "method": {"kind": "dns_core"}, "status": "ACTIVE" if issued else "NEW",
        "cert": crt if issued else None,
        "key": box.seal("secret_certificates", record_uuid, "key", key) if issued else None})
