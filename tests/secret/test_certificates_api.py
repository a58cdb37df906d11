"""/v1/secret/certificates/: the fields and rules of reference-api.md section 6, at their
boundaries, against the real API (no daemon: the status stays NEW)."""

import datetime
import uuid

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from appliance.iam.builtin import ADMIN_PROJECT

from .conftest import remember

C = "/v1/secret/certificates"
NOT_AFTER = datetime.datetime(2031, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def key_pair(kind="ec"):
    key = ec.generate_private_key(ec.SECP256R1()) if kind == "ec" else \
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return key, pem


def self_signed(key, name="manual.test", not_after=NOT_AFTER):
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_after - datetime.timedelta(days=30)).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture(scope="module")
def manual():
    key, key_pem = key_pair()
    return remember(key_pem), self_signed(key)


def body(**fields):
    return {"name": f"c-{uuid.uuid4().hex[:10]}", "project_id": ADMIN_PROJECT,
            "domains": ["www.example.test"], **fields}


def refused(resp, status=400, words=()):
    assert resp.status == status, resp
    error = resp.json
    assert set(error) >= {"type", "code", "message"}, error
    for word in words:
        assert word in error["message"], error
    return error


def count(server):
    return len(server.store.collection("secret_certificates").records())


def test_create_fills_the_defaults(admin):
    resp = admin.post(C, body(email="ops@example.org"))
    assert resp.status == 201, resp
    got = resp.json
    assert got["method"] == {"kind": "dns_core"} and got["constructor"] == {"kind": "plain"}
    assert got["expiration_threshold"] == 14
    assert got["status"] == "NEW" and got["status_reason"] is None
    assert got["key"] is None and got["cert"] is None and got["expiration_at"] is None
    assert got["domains"] == ["www.example.test"] and got["email"] == "ops@example.org"
    assert admin.get(f"{C}/{got['uuid']}").json == got
    assert got["uuid"] in [c["uuid"] for c in admin.get(C).json]


@pytest.mark.parametrize("domains", [
    ["WWW.Example.TEST."], ["*.example.test"], ["*.example.test", "example.test"],
    ["_x.example.test"], ["a-b.c-d.test"], [("a" * 63 + ".") * 3 + "b" * 61],
])
def test_good_domains_are_taken_lower_case_without_the_final_dot(admin, domains):
    resp = admin.post(C, body(domains=domains))
    assert resp.status == 201, resp
    assert resp.json["domains"] == [d.lower().rstrip(".") for d in domains]


@pytest.mark.parametrize("domains", [
    [], ["localhost"], ["a..example.test"], ["-a.example.test"], ["a-.example.test"],
    ["*.*.example.test"], ["a.*.example.test"], ["*example.test"], ["www example.test"],
    ["a" * 64 + ".test"], [("a" * 63 + ".") * 3 + "b" * 62], ["ex\u00e4mple.test"],
    ["1.2.3.4/x"], ["www.example.test", "WWW.example.test."], "www.example.test", [3],
    None, [f"h{i}.example.test" for i in range(101)],
])
def test_bad_domains_are_refused(admin, server, domains):
    before = count(server)
    refused(admin.post(C, body(domains=domains)))
    assert count(server) == before


def test_a_hundred_domains_is_the_most(admin):
    assert admin.post(C, body(domains=[f"h{i}.example.test" for i in range(100)])).status \
        == 201


def test_domains_are_required(admin, server):
    fields = body()
    del fields["domains"]
    before = count(server)
    refused(admin.post(C, fields), words=["domains"])
    assert count(server) == before


@pytest.mark.parametrize("email", ["ops", "ops@", "@example.org", "ops@example",
                                   "a b@example.org", "x" * 65 + "@example.org", 3, ""])
def test_bad_emails_are_refused(admin, server, email):
    before = count(server)
    refused(admin.post(C, body(email=email)))
    assert count(server) == before


@pytest.mark.parametrize("threshold,ok", [(0, True), (3650, True), (-1, False),
                                          (3651, False), ("14", False), (1.5, False)])
def test_expiration_threshold_bounds(admin, threshold, ok):
    resp = admin.post(C, body(expiration_threshold=threshold))
    if ok:
        assert resp.status == 201 and resp.json["expiration_threshold"] == threshold
    else:
        refused(resp)


def test_null_threshold_and_method_are_not_given(admin):
    """null on a field without use for null is "not given" (docs/validation.md): the
    defaults, 14 days and dns_core."""
    resp = admin.post(C, body(expiration_threshold=None, method=None))
    assert resp.status == 201, resp
    assert (resp.json["expiration_threshold"], resp.json["method"]) == (
        14, {"kind": "dns_core"})


@pytest.mark.parametrize("method", [{"kind": "acme"}, {}, {"kind": "dns_core", "x": 1},
                                    "dns_core"])
def test_bad_methods_are_refused(admin, method):
    refused(admin.post(C, body(method=method)))


@pytest.mark.parametrize("field", ["key", "cert"])
def test_key_or_cert_with_dns_core_is_refused(admin, server, manual, field):
    key, cert = manual
    before = count(server)
    refused(admin.post(C, body(**{field: {"key": key, "cert": cert}[field]})),
            words=["key and cert are allowed only for manual method"])
    refused(admin.post(C, body(method={"kind": "dns_core"}, key=key, cert=cert)),
            words=["only for manual"])
    assert count(server) == before


@pytest.mark.parametrize("field,value", [("status", "ACTIVE"), ("status_reason", "x"),
                                         ("expiration_at", "2031-01-01T00:00:00Z")])
def test_read_only_fields_are_refused(admin, server, field, value):
    before = count(server)
    refused(admin.post(C, body(**{field: value})), status=403)
    assert count(server) == before
    made = admin.post(C, body()).json
    refused(admin.put(f"{C}/{made['uuid']}", {field: value}), status=403)
    assert admin.get(f"{C}/{made['uuid']}").json == made


def test_manual_takes_a_matching_pair_and_its_expiration(admin, server, manual):
    key, cert = manual
    resp = admin.post(C, body(method={"kind": "manual"}, key=key, cert=cert,
                              domains=["manual.test"]))
    assert resp.status == 201, resp
    got = resp.json
    assert got["key"] == key and got["cert"] == cert
    assert got["expiration_at"] == "2031-01-02T03:04:05.000000Z"
    stored = server.store.collection("secret_certificates").get(got["uuid"])
    assert "PRIVATE KEY" not in stored["key"] and stored["cert"] == cert


def test_manual_takes_a_chain_leaf_first(admin, manual):
    key, cert = manual
    ca_key, _ = key_pair("rsa")
    chain = cert + self_signed(ca_key, "ca.test")
    assert admin.post(C, body(method={"kind": "manual"}, key=key, cert=chain)).status == 201
    refused(admin.post(C, body(method={"kind": "manual"}, key=key,
                               cert=self_signed(ca_key, "ca.test") + cert)),
            words=["not for this key"])


def test_manual_refusals(admin, server, manual):
    key, cert = manual
    other_key, other_pem = key_pair("rsa")
    bad = {
        "key missing": ({"cert": cert}, "required for method manual"),
        "cert missing": ({"key": key}, "required for method manual"),
        "both missing": ({}, "required for method manual"),
        "key not PEM": ({"key": "nope", "cert": cert}, "key:"),
        "cert not PEM": ({"key": key, "cert": "nope"}, "cert:"),
        "cert cut": ({"key": key, "cert": cert[:200]}, "cert:"),
        "another key": ({"key": other_pem, "cert": cert}, "not for this key"),
        "key too long": ({"key": key + "x" * 10240, "cert": cert}, "key"),
        "cert null": ({"key": key, "cert": None}, "required"),
    }
    before = count(server)
    for name, (fields, words) in bad.items():
        error = refused(admin.post(C, body(method={"kind": "manual"}, **fields)))
        assert words in error["message"], (name, error)
    assert count(server) == before


def test_put_forces_new_and_keeps_the_rules(admin, manual):
    key, cert = manual
    made = admin.post(C, body()).json
    path = f"{C}/{made['uuid']}"
    resp = admin.put(path, {"description": "d", "expiration_threshold": 30,
                            "email": "a@b.test"})
    assert resp.status == 200 and resp.json["status"] == "NEW"
    assert resp.json["expiration_threshold"] == 30
    current = admin.get(path).json
    for change, words in (({"key": key}, "only for manual"),
                          ({"cert": cert}, "only for manual"),
                          ({"method": {"kind": "manual"}}, "required for method manual"),
                          ({"method": {"kind": "manual"}, "key": key}, "required"),
                          ({"domains": []}, "at least one"),
                          ({"domains": ["a.test", "A.test"]}, "each name once"),
                          ({"project_id": str(uuid.uuid4())}, ""),
                          ({"expiration_threshold": -1}, "")):
        error = refused(admin.put(path, change), status=(403 if "project_id" in change
                                                          else 400))
        assert words in error["message"], (change, error)
        assert admin.get(path).json == current
    # to manual with a pair, then a new cert alone for the stored key, then back
    resp = admin.put(path, {"method": {"kind": "manual"}, "key": key, "cert": cert})
    assert resp.status == 200, resp
    assert resp.json["expiration_at"] == "2031-01-02T03:04:05.000000Z"
    later = datetime.datetime(2032, 5, 6, tzinfo=datetime.timezone.utc)
    loaded = serialization.load_pem_private_key(key.encode(), None)
    resp = admin.put(path, {"cert": self_signed(loaded, not_after=later)})
    assert resp.status == 200 and resp.json["expiration_at"].startswith("2032-05-06")
    _, other = key_pair()
    refused(admin.put(path, {"key": other}), words=["not for this key"])
    resp = admin.put(path, {"method": {"kind": "dns_core"}})
    assert resp.status == 200
    back = resp.json
    assert back["key"] is None and back["cert"] is None and back["expiration_at"] is None
    assert back["method"] == {"kind": "dns_core"} and back["status"] == "NEW"


def test_names_are_unique_per_project(admin):
    first = body()
    assert admin.post(C, first).status == 201
    refused(admin.post(C, body(name=first["name"])), status=409)


def test_unknown_fields_are_refused(admin):
    refused(admin.post(C, body(overcome_threshold=True)))
