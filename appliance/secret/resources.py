"""Secret resources: opaque secrets, passwords, SSH keys, RSA keys, certificates.

All four hold material the delivery daemon writes to the data plane, so they share one
life cycle (every write returns the record to NEW; the daemon moves it on) and one rule:
their sensitive fields are sealed in the store (crypto.SecretBox) and opened only to be
returned to a caller holding the read permission.
"""

import re

from appliance import targeting
from appliance.api.errors import BadRequest
from appliance.api.fields import (UUID, DateTime, Enum, Field, Integer, List, Object, String,
                                  Tags, Text)
from appliance.api.resource import Action, Resource
from appliance.targeting import TARGET_SCHEMA

from . import generate
from .crypto import SecretBox
from .kinds import STATUSES, UNDELIVERED
from .kinds import effective_value  # noqa: F401 (part of this module's interface)

VALUE_LIMIT = 10240
CONSTRUCTOR_KINDS = ["plain"]
CONSTRUCTOR = {"type": "object", "properties": {"kind": {"enum": CONSTRUCTOR_KINDS}},
               "required": ["kind"], "additionalProperties": False}
NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.@:/ -]{0,254}$"
_OPENED = "__opened__"
USER = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
# relative to the home or absolute; no empty, `.` or `..` component
AUTHORIZED_KEYS = r"^/?(?!\.\.?(/|$))[^/\x00\n]+(/(?!\.\.?(/|$))[^/\x00\n]+)*$"
# a key type, its base64 and a comment: no options (command=...), no second line
PUBLIC_KEY = re.compile(r"^(ssh-[a-z0-9-]+|ecdsa-sha2-[a-z0-9-]+|sk-[a-z0-9@.-]+)"
                        r" [A-Za-z0-9+/]+={0,3}( [^\n\r]*)?\Z")


def common_fields():
    return [
        Field("name", String(255, pattern=NAME), required=True),
        Field("project_id", UUID(), required=True, create_only=True),
        Field("description", Text(4096)),
        Field("tags", Tags()),
    ]


def status_fields():
    return [
        Field("status", Enum(*STATUSES), read_only=True,
              description="NEW until delivered to the data plane, then ACTIVE"),
        Field("status_reason", String(1024), read_only=True,
              description="why the last delivery failed (status ERROR)"),
    ]


class SecretMaterial(Resource):
    """Base of the four kinds: sealing, status reset, project existence."""
    sealed = ()

    def register(self, api):
        super().register(api)
        self.box = SecretBox(api.store)

    def _seal(self, uuid, values):
        for name in self.sealed:
            if name in values:
                values[name] = self.box.seal(self.kind, uuid, name, values[name])
        return values

    def opened(self, record):
        return {**self.box.open_fields(self.kind, record, self.sealed), _OPENED: True}

    def load_visible(self, call, uuid):
        return self.opened(super().load_visible(call, uuid))

    def render(self, record, only=None):
        if not record.get(_OPENED):
            record = self.opened(record)
        return super().render(record, only)

    def prepare_create(self, call, record):
        record.update(UNDELIVERED)
        return self._seal(record["uuid"], self.fill(call, record))

    def prepare_update(self, call, current, changes):
        changes = self.refill(call, current, changes)
        changes.update(UNDELIVERED)
        return self._seal(current["uuid"], changes)

    # kind-specific: derive generated fields
    def fill(self, call, record):
        return record

    def refill(self, call, current, changes):
        return changes


class Secrets(SecretMaterial):
    sealed = ("value", "default_value")

    def __init__(self):
        super().__init__(
            name="Secret", path="/v1/secret/secrets", kind="secret_secrets", service="secret",
            policy="secret", project_scoped=True, unique=[("name", "project_id")],
            description="an opaque value; delivered value = value, else default_value",
            fields=common_fields() + [
                Field("constructor", Object(CONSTRUCTOR), default=lambda: {"kind": "plain"},
                      nullable=False, description="kind plain (the default, as in the "
                                                  "reference): the value is stored as given"),
                Field("value", String(VALUE_LIMIT), omit_unset=True, filterable=False,
                      description="null falls back to default_value"),
                Field("default_value", String(VALUE_LIMIT), omit_unset=True,
                      filterable=False, description="owned by a manifest; used while "
                                                    "value is unset"),
            ] + status_fields())

    def link_value(self, shown, name):
        if name == "value":
            return effective_value(self.kind, shown)
        return super().link_value(shown, name)


class Passwords(SecretMaterial):
    sealed = ("value",)
    METHODS = ("AUTO_HEX", "AUTO_URL_SAFE", "MANUAL")

    def __init__(self):
        low, high = generate.PASSWORD_LENGTH
        super().__init__(
            name="Password", path="/v1/secret/passwords", kind="secret_passwords",
            service="secret", policy="password", project_scoped=True,
            unique=[("name", "project_id")],
            description="a password generated once (AUTO_*) or set (MANUAL)",
            fields=common_fields() + [
                Field("constructor", Object(CONSTRUCTOR), default=lambda: {"kind": "plain"},
                      nullable=False),
                Field("method", Enum(*self.METHODS), default="AUTO_HEX", nullable=False),
                Field("default_length", Integer(low, high), default=32, nullable=False,
                      description=f"length of a generated value, {low} to {high}"),
                Field("value", String(VALUE_LIMIT), filterable=False,
                      description="generated for AUTO_*; required for MANUAL"),
            ] + status_fields(),
            actions=[Action("regenerate", self.regenerate,
                            summary="Generate a new value (AUTO_* methods)")])

    def fill(self, call, record):
        if record["method"] == "MANUAL":
            if not record.get("value"):
                raise BadRequest("value: required for method MANUAL")
        elif record.get("value") is not None:
            raise BadRequest(f"value: generated for method {record['method']}; "
                             "use method MANUAL to set it")
        else:
            record["value"] = generate.password(record["method"], record["default_length"])
        return record

    def refill(self, call, current, changes):
        method = changes.get("method", current["method"])
        length = changes.get("default_length", current["default_length"])
        if method == "MANUAL":
            if "value" in changes and not changes["value"]:
                raise BadRequest("value: required for method MANUAL")
            return changes
        if "value" in changes:
            raise BadRequest(f"value: generated for method {method}; "
                             "use method MANUAL to set it")
        # a generated value stays as it is unless what it was generated from changes
        if method != current["method"] or length != current["default_length"]:
            changes["value"] = generate.password(method, length)
        return changes

    def regenerate(self, call, record):
        if record["method"] == "MANUAL":
            raise BadRequest("method MANUAL: set a new value with PUT instead")
        changes = {"value": generate.password(record["method"], record["default_length"]),
                   **UNDELIVERED}
        updated = self.collection().update(record["uuid"], self._seal(record["uuid"], changes))
        return self.render(updated)


class SshKeys(SecretMaterial):
    sealed = ("private_key",)

    def __init__(self):
        super().__init__(
            name="SshKey", path="/v1/secret/ssh_keys", kind="secret_ssh_keys",
            service="secret", policy="ssh_key", project_scoped=True,
            unique=[("name", "project_id")],
            description="an SSH key pair generated by the service (OpenSSH format)",
            fields=common_fields() + [
                Field("constructor", Object(CONSTRUCTOR), default=lambda: {"kind": "plain"},
                      nullable=False, description="kind plain (the default; the "
                                                  "reference's clients send it)"),
                Field("algorithm", Enum("ed25519", "rsa"), default="ed25519",
                      nullable=False, create_only=True),
                Field("bits", Integer(2048, 4096), create_only=True,
                      description="RSA only: 2048, 3072 or 4096 (default 3072)"),
                Field("comment", String(255), create_only=True),
                Field("public_key", Text(16384), read_only=True),
                Field("fingerprint", String(128), read_only=True),
                Field("private_key", Text(16384), read_only=True, filterable=False,
                      description="OpenSSH private key; needs secret.ssh_key.read"),
                # where the node agent authorizes the key (docs/secrets.md, "SSH-key
                # targets"); the reference's fields
                Field("target", Object(TARGET_SCHEMA),
                      description="node, node_set or nodes whose `user` gets the key"),
                Field("user", String(64, min_length=1, pattern=USER),
                      description="required with a target"),
                Field("authorized_keys", String(256, min_length=1, pattern=AUTHORIZED_KEYS),
                      default=".ssh/authorized_keys", nullable=False,
                      description="relative to the user's home, or absolute"),
                Field("target_public_key", Text(10240),
                      description="the public key line to authorize; null: this key's own "
                                  "public_key"),
            ] + status_fields())

    def prepare_create(self, call, record):
        self.check_target(call, record)
        return super().prepare_create(call, record)

    def prepare_update(self, call, current, changes):
        self.check_target(call, {**current, **changes})
        return super().prepare_update(call, current, changes)

    def declared_links(self):
        return targeting.links(self.kind)

    def check_target(self, call, record):
        targeting.normalized(record.get("target"))
        if record.get("target_public_key") and not PUBLIC_KEY.match(
                record["target_public_key"].strip()):
            raise BadRequest("target_public_key: one OpenSSH public key line "
                             "(<type> <base64> [comment]), no options")
        if record.get("target") is None:
            return
        if not record.get("user"):
            raise BadRequest("user: required with a target")
        targeting.checked(call.store, call.principal, record["project_id"], record["target"])

    def fill(self, call, record):
        if record["algorithm"] == "ed25519":
            if record.get("bits") is not None:
                raise BadRequest("bits: only for algorithm rsa")
        else:
            record["bits"] = record.get("bits") or 3072
            if record["bits"] not in generate.RSA_BITS:
                raise BadRequest("bits: must be one of 2048, 3072, 4096")
        private, public, fingerprint = generate.ssh_key(record["algorithm"], record["bits"],
                                                        record.get("comment"))
        record.update(private_key=private, public_key=public, fingerprint=fingerprint)
        return record


class RsaKeys(SecretMaterial):
    sealed = ("private_key",)

    def __init__(self):
        super().__init__(
            name="RsaKey", path="/v1/secret/rsa_keys", kind="secret_rsa_keys",
            service="secret", policy="rsa_key", project_scoped=True,
            unique=[("name", "project_id")],
            description="an RSA key pair generated by the service (PEM)",
            fields=common_fields() + [
                Field("bitness", Integer(2048, 4096), default=2048, nullable=False,
                      create_only=True, description="2048, 3072 or 4096 (the reference's "
                                                    "name)"),
                Field("bits", Integer(2048, 4096), write_only=True, create_only=True,
                      description="deprecated input alias of bitness"),
                Field("public_key", Text(16384), read_only=True),
                Field("private_key", Text(16384), read_only=True, filterable=False,
                      description="PKCS#8 PEM; needs secret.rsa_key.read"),
            ] + status_fields())

    def create_record(self, call, body):
        # `bits` was this field's name before `bitness`: old clients still send it
        if isinstance(body, dict) and "bits" in body and "bitness" in body \
                and body["bits"] != body["bitness"]:
            raise BadRequest("bits: a deprecated alias of bitness; send one of them")
        return super().create_record(call, body)

    def fill(self, call, record):
        given = "bitness"
        if record.get("bits") is not None:
            record["bitness"], given = record["bits"], "bits"
        record.pop("bits", None)
        if record["bitness"] not in generate.RSA_BITS:
            raise BadRequest(f"{given}: must be one of 2048, 3072, 4096")
        record["private_key"], record["public_key"] = generate.rsa_key_pem(record["bitness"])
        return record


def delivered_resources():
    """The four kinds the delivery daemon writes to the data plane (appliance/secret/
    kinds.py); certificates are the certificate daemon's."""
    return [Secrets(), Passwords(), SshKeys(), RsaKeys()]


def all_resources():
    return delivered_resources() + [Certificates()]


KINDS = {r.kind: r for r in delivered_resources()}


# a domain of a certificate: a host name of two labels or more, or a wildcard on one
CERT_DOMAIN = (r"^(?=.{1,253}\.?$)(\*\.)?(?!-)[A-Za-z0-9_-]{1,63}(?<!-)"
               r"(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))+\.?$")
EMAIL = r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$"
CERT_METHODS = ("dns_core", "manual")
METHOD = {"type": "object", "properties": {"kind": {"enum": list(CERT_METHODS)}},
          "required": ["kind"], "additionalProperties": False}
MAX_DOMAINS = 100           # Let's Encrypt's limit of names per certificate
PEM_LIMIT = 10240           # the reference's limit for key and cert


class Certificates(SecretMaterial):
    """A TLS certificate: issued through ACME DNS-01 on our DNS (method dns_core, by the
    certificate daemon, docs/certificates.md) or given with its key (manual)."""
    sealed = ("key",)

    def __init__(self):
        super().__init__(
            name="Certificate", path="/v1/secret/certificates", kind="secret_certificates",
            service="secret", policy="certificate", project_scoped=True,
            unique=[("name", "project_id")],
            description="a TLS certificate, issued through ACME DNS-01 on the built-in DNS "
                        "(dns_core) or uploaded (manual)",
            fields=common_fields() + [
                Field("constructor", Object(CONSTRUCTOR), default=lambda: {"kind": "plain"},
                      nullable=False),
                Field("method", Object(METHOD), default=lambda: {"kind": "dns_core"},
                      nullable=False, description="dns_core (the default): issued by the "
                      "certificate daemon; manual: key and cert given"),
                Field("email", String(254, pattern=EMAIL),
                      description="contact of the ACME account the certificate is issued "
                                  "under"),
                Field("domains", List(String(254, pattern=CERT_DOMAIN), max_items=MAX_DOMAINS),
                      required=True, description="names in our DNS zones; *.name for a "
                                                 "wildcard"),
                Field("key", Text(PEM_LIMIT), filterable=False,
                      description="PEM private key: issued for dns_core (read-only then), "
                                  "required for manual"),
                Field("cert", Text(4 * PEM_LIMIT), filterable=False,
                      description="PEM chain, leaf first: issued for dns_core (read-only "
                                  "then), required for manual"),
                Field("expiration_at", DateTime(), read_only=True,
                      description="the leaf's notAfter"),
                Field("expiration_threshold", Integer(0, 3650), default=14, nullable=False,
                      description="days before expiration_at from which it is renewed"),
            ] + status_fields())

    def fill(self, call, record):
        return self._checked(record, record)

    def refill(self, call, current, changes):
        merged = {**current, **changes}
        if merged["method"] != current["method"]:
            # a switch of method is a new certificate: nothing of the old one is kept
            if merged["method"]["kind"] == "manual" and not (
                    changes.get("key") and changes.get("cert")):
                raise BadRequest("key and cert: required for method manual")
            for name in ("key", "cert", "expiration_at"):
                changes.setdefault(name, None)
        return self._checked(merged, changes)

    def _checked(self, record, out):
        """The method's rules over the whole `record` (a new one, or the current one with
        the changes laid over it); `out` (the record or the changes) gets the normalized
        domains and, for manual, the expiration_at of the given certificate. A change of
        domains under dns_core needs no more: the daemon issues again for a certificate
        whose names are not the domains (docs/certificates.md)."""
        domains = [d.rstrip(".").lower() for d in record["domains"]]
        if not domains:
            raise BadRequest("domains: at least one")
        if len(set(domains)) != len(domains):
            raise BadRequest("domains: each name once")
        if "domains" in out:
            out["domains"] = domains
        if record["method"]["kind"] == "dns_core":
            if out.get("key") is not None or out.get("cert") is not None:
                raise BadRequest("key and cert are allowed only for manual method")
            return out
        if not record.get("key") or not record.get("cert"):
            raise BadRequest("key and cert: required for method manual")
        if "key" in out or "cert" in out:
            out["expiration_at"] = manual_expiration(record["key"], record["cert"])
        return out


def manual_expiration(key_pem, chain_pem):
    """The notAfter (RFC 3339) of an uploaded chain, once it is known to be a PEM chain
    whose leaf (the first certificate) is for the PEM private key; else BadRequest."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        chain = x509.load_pem_x509_certificates(chain_pem.encode())
    except ValueError:
        raise BadRequest("cert: not a PEM certificate chain") from None
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise BadRequest("key: not an unencrypted PEM private key") from None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if chain[0].public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise BadRequest("cert: its first certificate is not for this key")
    return chain[0].not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
