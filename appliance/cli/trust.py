"""How the CLI trusts an HTTPS endpoint: the way ssh trusts a host.

The appliance image serves its API with a self-signed certificate made at first boot, so no
CA on the operator's machine vouches for it and a plain verified connection fails. The
console banner shows the certificate's SHA-256 fingerprint; `appliance login` takes it
(`--fingerprint SHA256:AB:CD:...`), or a CA file (`--ca-file`), or shows the fingerprint and
asks on the terminal (trust on first use). The choice is kept in the session and every later
request is checked against it: a pinned fingerprint is compared with the SHA-256 of the
certificate the server sends, before any request goes out. A pin replaces the hostname and
CA checks, as a known_hosts line does: the certificate names the appliance's own addresses,
while the operator reaches it through a forwarded port on 127.0.0.1.

The fingerprint's text form is the one the banner prints and `openssl x509 -fingerprint
-sha256` shows, with ssh's `SHA256:` in front: `SHA256:` and 32 colon-separated upper-case
hex bytes. Input is also read without the prefix, without colons, in lower case.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import os
import re
import socket
import ssl
import urllib.parse
import urllib.request

from appliance.cli import CliError, ExitStatus, UsageError

PREFIX = "SHA256:"
_HEX_FORMS = re.compile(r"^(?:[0-9a-f]{64}|(?:[0-9a-f]{2}:){31}[0-9a-f]{2})$")
FORM_HELP = "SHA256: then 32 hex bytes separated by colons (SHA256:AB:CD:...:EF)"


def fingerprint_of(der: bytes) -> str:
    """The fingerprint of a certificate in DER form, in the banner's form."""
    return PREFIX + hashlib.sha256(der).digest().hex(":").upper()


def parse_fingerprint(text: str) -> str:
    """The banner's form of a fingerprint given on the command line; UsageError otherwise."""
    value = text.strip()
    if value.upper().startswith(PREFIX):
        value = value[len(PREFIX):]
    value = value.lower()
    if not _HEX_FORMS.match(value):
        raise UsageError(f"--fingerprint takes {FORM_HELP}, as the appliance's console "
                         f"banner shows it; got {text!r}")
    return PREFIX + bytes.fromhex(value.replace(":", "")).hex(":").upper()


class UntrustedCertificate(CliError):
    """The server's certificate is not one to trust: nothing was sent to it. (Not an
    OSError, so urllib passes it and CertificateMismatch through instead of wrapping them.)"""

    exit_status = ExitStatus.CLIENT_ERROR


@dataclasses.dataclass(frozen=True)
class Trust:
    """What an HTTPS connection trusts. At most one of the three is set; none of them means
    the system's CAs with hostname checks (a certificate from a public or corporate CA)."""

    fingerprint: str | None = None
    ca_file: str | None = None
    insecure: bool = False

    def describe(self) -> str:
        if self.fingerprint:
            return f"the pinned certificate {self.fingerprint}"
        if self.ca_file:
            return f"certificates signed by the CA in {self.ca_file}"
        if self.insecure:
            return "any certificate (--insecure: not checked)"
        return "certificates signed by this machine's CAs"

    def ssl_context(self) -> ssl.SSLContext:
        if self.fingerprint or self.insecure:
            # The pin is checked after the handshake (PinnedHTTPSConnection); chain and
            # hostname say nothing about a self-signed certificate.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"cannot use the CA file {self.ca_file}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None

    def to_json(self) -> dict:
        return {"fingerprint": self.fingerprint, "ca_file": self.ca_file,
                "insecure": self.insecure}

    @classmethod
    def from_json(cls, data) -> "Trust":
        if not isinstance(data, dict):
            raise ValueError("tls must be an object")
        fingerprint = data.get("fingerprint")
        if fingerprint:
            try:
                fingerprint = parse_fingerprint(fingerprint)
            except UsageError:
                raise ValueError(f"not a fingerprint: {fingerprint!r}") from None
        return cls(fingerprint=fingerprint or None, ca_file=data.get("ca_file") or None,
                   insecure=bool(data.get("insecure")))


def changed_message(endpoint: str, pinned: str, served: str) -> str:
    return (
        f"the certificate of {endpoint} has CHANGED since you pinned it.\n"
        f"  pinned (in the session): {pinned}\n"
        f"  served now:              {served}\n"
        "Someone may be between you and the appliance, or the appliance has a new "
        "certificate. Nothing was sent. Compare the new fingerprint with the one on the "
        "appliance's console; if they match, pin it again:\n"
        f"  appliance login --endpoint {endpoint} --fingerprint {served}")


def mismatch_message(endpoint: str, given: str, served: str) -> str:
    return (
        f"the certificate of {endpoint} has fingerprint {served}, not the {given} given "
        "with --fingerprint: the server is not the appliance you meant, or the fingerprint "
        "was copied wrongly. Nothing was sent and nothing was saved; check the fingerprint "
        "on the appliance's console banner.")


class CertificateMismatch(CliError):
    """The server's certificate does not have the pinned fingerprint; the connection was
    closed before anything was sent. ApiClient turns it into the message for its case
    (a fingerprint given at login, or one pinned in the session)."""

    exit_status = ExitStatus.CLIENT_ERROR

    def __init__(self, pinned: str, served: str):
        super().__init__(f"the server's certificate {served} is not the pinned {pinned}")
        self.pinned, self.served = pinned, served


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection that refuses, right after the handshake, a server whose
    certificate does not have the pinned fingerprint."""

    def __init__(self, *args, pin: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.pin = pin

    def connect(self):
        super().connect()
        served = fingerprint_of(self.sock.getpeercert(binary_form=True) or b"")
        if served != self.pin:
            self.sock.close()
            raise CertificateMismatch(self.pin, served)


class PinnedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, trust: Trust):
        super().__init__(context=trust.ssl_context())
        self.pin = trust.fingerprint

    def https_open(self, req):
        return self.do_open(PinnedHTTPSConnection, req, context=self._context, pin=self.pin)


def https_handler(trust: Trust) -> urllib.request.HTTPSHandler:
    if trust.fingerprint:
        return PinnedHTTPSHandler(trust)
    return urllib.request.HTTPSHandler(context=trust.ssl_context())


# --- what login asks before it sends a password ------------------------------------------------


@dataclasses.dataclass
class Probe:
    """What the server at an https endpoint presents: its certificate's fingerprint, and why
    this machine's CAs refuse it (None when they accept it)."""

    fingerprint: str
    refusal: str | None


def _host_port(endpoint: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(endpoint)
    return parts.hostname or "", parts.port or 443


def probe(endpoint: str, timeout: float) -> Probe:
    """Two handshakes with the server (no request is sent): one verified with this
    machine's CAs and hostname checks, one that only reads the certificate. A failure to
    connect raises the OSError (ssl.SSLError for a failed handshake).

    Direct connections: a proxy is not asked (an HTTPS proxy would tunnel to the same
    server; the later requests go through the transport, proxies and pin included)."""
    host, port = _host_port(endpoint)
    refusal = None
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with ssl.create_default_context().wrap_socket(raw, server_hostname=host):
                pass
    except ssl.SSLCertVerificationError as exc:
        refusal = exc.verify_message or str(exc)
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with Trust(insecure=True).ssl_context().wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True) or b""
    return Probe(fingerprint_of(der), refusal)


def no_terminal_message(endpoint: str, found: Probe) -> str:
    return (
        f"the certificate of {endpoint} is not trusted ({found.refusal}), and there is no "
        "terminal to ask whether to trust it. Its fingerprint is\n"
        f"  {found.fingerprint}\n"
        "If the appliance's console banner shows the same, log in with\n"
        f"  appliance login --endpoint {endpoint} --fingerprint {found.fingerprint}\n"
        "(or --ca-file FILE with the CA that signed it). Nothing was sent.")


def question(endpoint: str, found: Probe) -> str:
    return (
        f"The certificate of {endpoint} is not trusted ({found.refusal}).\n"
        f"Its fingerprint is {found.fingerprint}\n"
        "The appliance's console banner shows the fingerprint to expect.\n"
        "Trust this certificate and pin it in the session (yes/no)? ")


INSECURE_WARNING = ("warning: TLS certificate of {endpoint} NOT checked (--insecure): anyone "
                    "between you and it can read the password and tokens. Pin it instead: "
                    "appliance login --endpoint {endpoint} --fingerprint SHA256:...")


def ask_on_terminal(prompt: str) -> str | None:
    """The answer typed on the controlling terminal (as ssh asks, whatever stdin is: it may
    carry --password-stdin's password), or None when there is no terminal."""
    try:
        descriptor = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
    try:
        os.write(descriptor, prompt.encode("utf-8"))
        typed = b""
        while not typed.endswith(b"\n"):
            chunk = os.read(descriptor, 1024)  # the terminal hands over a line at a time
            if not chunk:
                break
            typed += chunk
        return typed.decode("utf-8", errors="replace")
    finally:
        os.close(descriptor)
