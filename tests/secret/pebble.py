"""Pebble (Debian's `pebble`, a real ACME server) and the whole certificate chain around it
for tests and benches: our API, our DNS daemon on loopback (Pebble resolves the DNS-01
challenges through it, `-dnsserver`) and the certificate daemon pointed at Pebble.

    with AcmeWorld(state_dir) as world:       # or the `acme_world` fixture (conftest)
        admin = world.admin()
        zone = world.zone(admin, "shop.test")
        cert = world.certificate(admin, ["shop.test", "*.shop.test"])
        world.wait_status(admin, cert["uuid"], "ACTIVE")

Pebble gets a TLS certificate made here (a throw-away CA, whose file is the daemon's
acme_ca_bundle), PEBBLE_VA_NOSLEEP=1 (no random validation delay), no nonce rejection and
no authorization reuse (so that every order is challenged through our DNS).
`validity_seconds` sets Pebble 2.4's certificateValidityPeriod (seconds; its default is
five years): short-lived certificates for the renewal tests. `blocked` names are refused
by Pebble (domainBlocklist); `daemon_settings` override the certificate daemon's settings
(a DNS server that does not answer, a directory that is not there).
"""

import datetime
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appliance.iam.builtin import ADMIN_PROJECT
from tests import processes
from tests.apiserver import ApiServer, free_port
from tests.conftest import ADMIN_PASSWORD, RUN_LOG_DIR
from tests.dns.test_server import DNSDaemon

PEBBLE = shutil.which("pebble") or "/usr/bin/pebble"
CERTS = "/v1/secret/certificates"


def _name(text):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_tls(directory):
    """A CA and a certificate for 127.0.0.1/localhost signed by it: (ca, cert, key) files."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("pebble test CA"))
          .issuer_name(_name("pebble test CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress
    leaf = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = [os.path.join(directory, n) for n in ("ca.pem", "cert.pem", "key.pem")]
    for path, data in zip(paths, (ca.public_bytes(serialization.Encoding.PEM),
                                  leaf.public_bytes(serialization.Encoding.PEM), _pem_key(key))):
        with open(path, "wb") as f:
            f.write(data)
    return paths


class Pebble:
    def __init__(self, directory, dns_port, validity_seconds=None, blocked=()):
        self.directory, self.dns_port = directory, dns_port
        self.validity_seconds = validity_seconds
        self.blocked = list(blocked)
        self.port, self.management_port = free_port(), free_port()
        self.proc = None
        self.log_path = os.path.join(RUN_LOG_DIR, f"pebble-{self.port}.log")

    @property
    def url(self):
        return f"https://127.0.0.1:{self.port}/dir"

    def start(self):
        os.makedirs(self.directory, exist_ok=True)
        self.ca, cert, key = make_tls(self.directory)
        config = {"pebble": {
            "listenAddress": f"127.0.0.1:{self.port}",
            "managementListenAddress": f"127.0.0.1:{self.management_port}",
            "certificate": cert, "privateKey": key,
            # the ports Pebble would validate http-01 and tls-alpn-01 on: unused (dns-01)
            "httpPort": 5002, "tlsPort": 5001,
            "ocspResponderURL": "", "externalAccountBindingRequired": False,
            # names Pebble refuses to order for: an ACME refusal in the error tests
            "domainBlocklist": self.blocked}}
        if self.validity_seconds:
            config["pebble"]["certificateValidityPeriod"] = int(self.validity_seconds)
        path = os.path.join(self.directory, "pebble.json")
        with open(path, "w") as f:
            json.dump(config, f)
        env = dict(os.environ, PEBBLE_VA_NOSLEEP="1", PEBBLE_WFE_NONCEREJECT="0",
                   PEBBLE_AUTHZREUSE="0")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [PEBBLE, "-config", path, "-dnsserver", f"127.0.0.1:{self.dns_port}"],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory)
        context = ssl.create_default_context(cafile=self.ca)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url, context=context, timeout=2).read()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pebble did not start; see {self.log_path}")
                time.sleep(0.05)

    def root_pem(self):
        """Pebble's root CA (made anew at each start; its management interface): what a
        client checks an issued chain against, e.g. an HTTPS vhost serving it."""
        context = ssl.create_default_context(cafile=self.ca)
        url = f"https://127.0.0.1:{self.management_port}/roots/0"
        return urllib.request.urlopen(url, context=context, timeout=5).read().decode()

    def orders(self):
        """How many orders Pebble has taken so far (from its log)."""
        with open(self.log_path, errors="replace") as f:
            return sum(1 for line in f if "Added order" in line)

    def stop(self):
        if self.proc:
            processes.stop(self.proc, 5)


class AcmeWorld:
    """API + our DNS daemon + Pebble + the certificate daemon, on loopback."""

    def __init__(self, state_dir, validity_seconds=None, api=None, blocked=(),
                 daemon_settings=None):
        self.state_dir = state_dir
        self.server = api
        self._own_api = api is None
        self.validity_seconds = validity_seconds
        self.blocked = blocked
        self.daemon_settings = daemon_settings or {}
        self.dns = self.pebble = self.daemon = None

    def start(self):
        from tests.secret.conftest import DaemonProcess
        if self.server is None:
            self.server = ApiServer(self.state_dir, ADMIN_PASSWORD).start()
        state = self.server.settings["state_dir"]
        self.dns = DNSDaemon(state, free_port()).start()
        self.pebble = Pebble(os.path.join(state, "..", f"pebble-{uuid.uuid4().hex[:6]}"),
                             self.dns.port, self.validity_seconds, self.blocked).start()
        self.daemon = DaemonProcess("certificates", state, env=self.daemon_env()).start()
        return self

    def daemon_env(self):
        return {"APPLIANCE_ACME_DIRECTORY_URL": self.pebble.url,
                "APPLIANCE_ACME_CA_BUNDLE": self.pebble.ca,
                "APPLIANCE_DNS_HOST": "127.0.0.1",
                "APPLIANCE_DNS_PORT": str(self.dns.port),
                "APPLIANCE_ACME_DNS_WAIT_SECONDS": "10",
                "APPLIANCE_ACME_RETRY_FIRST_SECONDS": "1",
                "APPLIANCE_ACME_RETRY_MAX_SECONDS": "4",
                **{f"APPLIANCE_{k.upper()}": str(v) for k, v in self.daemon_settings.items()}}

    def stop(self):
        for part in (self.daemon, self.pebble, self.dns):
            if part is not None:
                part.stop()
        if self._own_api and self.server is not None:
            self.server.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- helpers for tests -------------------------------------------------------------

    def admin(self):
        return self.server.client(self.server.login("admin", ADMIN_PASSWORD))

    def zone(self, client, name, project_id=ADMIN_PROJECT):
        resp = client.post("/v1/dns/domains", {"name": name, "project_id": project_id})
        assert resp.status == 201, resp
        return resp.json

    def certificate(self, client, domains, project_id=ADMIN_PROJECT, **fields):
        body = {"name": f"c-{uuid.uuid4().hex[:10]}", "project_id": project_id,
                "domains": domains, "email": "ops@example.org", **fields}
        resp = client.post(CERTS, body)
        assert resp.status == 201, resp
        return resp.json

    def wait_status(self, client, cert_uuid, wanted, timeout=30.0, changed_from=None):
        """The certificate once its status is `wanted` (and, if given, its cert differs
        from `changed_from`); AssertionError with its last state otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            got = client.get(f"{CERTS}/{cert_uuid}").json
            if got["status"] == wanted and (changed_from is None or
                                            got["cert"] != changed_from):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"certificate not {wanted} in {timeout} s: "
                                     f"{got['status']} {got.get('status_reason')}")
            time.sleep(0.05)

    def challenge_records(self):
        """Every TXT record named _acme-challenge in the store, any zone."""
        return [r for r in self.server.store.collection("dns_records").records()
                if r["type"] == "TXT" and r["record"]["name"].startswith("_acme-challenge")]


def main(argv=None):
    """`python -m tests.secret.pebble`: Pebble for `make run`'s certificates (the README's
    walkthrough), on fixed ports, its DNS-01 checks asked of our DNS server; prints the two
    settings `make run` needs, runs until Ctrl-C."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m tests.secret.pebble",
                                     description=main.__doc__)
    parser.add_argument("--dir", default=os.path.join(os.getcwd(), "var-pebble"),
                        help="where its config, TLS certificate and CA go (./var-pebble)")
    parser.add_argument("--port", type=int, default=14000)
    parser.add_argument("--dns-port", type=int, default=int(os.environ.get(
        "APPLIANCE_DNS_PORT", "5353")), help="our DNS server's port (make run: 5353)")
    args = parser.parse_args(argv)
    pebble = Pebble(os.path.abspath(args.dir), args.dns_port)
    pebble.port, pebble.management_port = args.port, args.port + 1000
    pebble.log_path = os.path.join(pebble.directory, "pebble.log")
    # a SIGTERM stops it as Ctrl-C does, through the finally below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pebble.start()
    print(f"APPLIANCE_ACME_DIRECTORY_URL={pebble.url}\n"
          f"APPLIANCE_ACME_CA_BUNDLE={pebble.ca}\n"
          f"(pebble's log: {pebble.log_path}; Ctrl-C stops it)", flush=True)
    try:
        pebble.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        pebble.stop()


if __name__ == "__main__":
    main()
