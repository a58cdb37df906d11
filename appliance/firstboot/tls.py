"""The self-signed certificate nginx serves on 443, made once and kept in the state
directory (<state>/tls/), so that an upgrade, which replaces the root, keeps it and the
fingerprint users pinned stays the same."""

import datetime
import ipaddress
import logging
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appliance.files import write_file

log = logging.getLogger("appliance.firstboot")

VALID_DAYS = 3650
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"


def fingerprint(cert):
    """SHA-256 of the certificate's DER form, as colon-separated hex (what browsers and
    `openssl x509 -fingerprint -sha256` show)."""
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()


def pin(cert):
    """The fingerprint as the banner shows it and `appliance login --fingerprint` takes it
    (appliance/cli/trust.py): ssh's `SHA256:` before the colon-separated hex."""
    return "SHA256:" + fingerprint(cert)


def make(hostname, addresses=()):
    """(certificate, key) for `hostname` and the IP `addresses`, plus localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    names = [x509.DNSName(hostname), x509.DNSName("localhost"),
             x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses
              if a != "127.0.0.1"]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname[:64]),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "appliance")])
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            # an hour back: a clock a little behind at first boot still accepts it
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _load(cert_path, key_path):
    """The kept certificate, or None when it is missing or unusable (then a new one is
    made: a box without a working certificate serves nothing)."""
    try:
        with open(cert_path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        with open(key_path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("the kept TLS certificate or key is unusable (%s): making a new one", e)
        return None
    if cert.public_key().public_numbers() != key.public_key().public_numbers():
        log.warning("the kept TLS key does not match its certificate: making a new one")
        return None
    return cert


def ensure(directory, hostname, addresses=()):
    """(cert path, key path, certificate) in `directory`, made when missing or unusable.
    The key is written 0600 before the certificate, each atomically: a crash in between
    leaves no certificate, so the next boot makes both again."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    cert_path = os.path.join(directory, CERT_FILE)
    key_path = os.path.join(directory, KEY_FILE)
    cert = _load(cert_path, key_path)
    if cert is None:
        cert, key = make(hostname, addresses)
        write_file(key_path, key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()), 0o600)
        write_file(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        log.info("made a TLS certificate for %s", hostname)
    return cert_path, key_path, cert
