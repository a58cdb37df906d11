"""DNS API: domains and their records (api-conventions section 5, spec 2.8).

A record is `{type, ttl, prio, disabled, tags, record: {kind, name, ...}}`; `record` is
checked by a schema of its type, `kind` must equal `type`, and `type` never changes.
Names are relative to the domain (`@` the apex, a bare `*` the zone wildcard). Creating a
domain creates its SOA; every change of a zone's records increases the SOA serial (both
rules in appliance/dns/records.py, which the daemons that write records call too); an SOA
is deleted only with its domain.
"""

import ipaddress
import re
import zlib

from appliance.api.errors import BadRequest, Conflict, Forbidden
from appliance.api.fields import (UUID, Boolean, Enum, Field, Integer, Object, Reference,
                                  String, Tags, Text)
from appliance.api.resource import Action, Resource
from appliance.api.validation import Validator
from appliance.dns import records as zone_records
from appliance.dns import resolve
from appliance.dns import zones as wire
from appliance.dns.adopt import REQUEST_SCHEMA as ADOPT_SCHEMA
from appliance.tenancy import zones as zone_rule

TYPES = ("A", "NS", "SOA", "TXT")
LABEL = r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)"
HOST = rf"^(?=.{{1,253}}$){LABEL}(\.{LABEL})*\.?$"
RELATIVE = rf"^(@|\*|(\*\.)?{LABEL}(\.{LABEL})*)$"
# bytes of UTF-8 content (64,986): served as 255-byte character-strings, the longest that
# fits in one DNS message over TCP whatever name is asked (appliance/dns/zones.py)
TXT_LIMIT = wire.TXT_MAX_OCTETS
TXT_LOCK_STRIPES = 16
U32 = {"type": "integer", "minimum": 0, "maximum": 4294967295}
SECONDS = {"type": "integer", "minimum": 1, "maximum": 2147483647}

_COMMON = {"kind": {"type": "string"}, "name": {"type": "string", "pattern": RELATIVE}}
RECORD_SCHEMAS = {
    "A": {"required": ["kind", "name", "address"],
          "properties": {**_COMMON, "address": {"type": "string", "format": "ipv4"}}},
    "NS": {"required": ["kind", "name", "content"],
           "properties": {**_COMMON, "content": {"type": "string", "pattern": HOST}}},
    "TXT": {"required": ["kind", "name", "content"],
            "properties": {**_COMMON, "content": {"type": "string", "minLength": 1}}},
    "SOA": {"required": ["kind", "name", "primary_dns", "serial", "refresh", "retry",
                         "expire", "ttl"],
            "properties": {**_COMMON, "primary_dns": {"type": "string", "pattern": HOST},
                           "serial": U32, "refresh": SECONDS, "retry": SECONDS,
                           "expire": SECONDS,
                           "ttl": {"type": "integer", "minimum": 0, "maximum": 2147483647}}},
}
_CHECKS = {t: Validator({"type": "object", "properties": {"record": {
    "type": "object", "additionalProperties": False, **s}}}) for t, s in RECORD_SCHEMAS.items()}
_Q = re.compile(r'^tags:"([^"]{1,255})"$')


class Domains(Resource):
    def __init__(self, settings=None):
        self.settings = settings or {}
        super().__init__(
            name="Domain", path="/v1/dns/domains", kind="dns_domains", service="dns",
            policy="domain", project_scoped=True, unique=[("name",)],
            description="a zone served by the built-in DNS server",
            fields=[
                Field("name", String(253, pattern=HOST), required=True, create_only=True,
                      description="the zone, e.g. example.test"),
                Field("project_id", UUID(), required=True, create_only=True),
                Field("description", Text(4096)),
                Field("tags", Tags()),
                Field("sync_to_ecosystem", Boolean(), default=False, nullable=False,
                      description="kept in step with the upstream DNS API by the mirror"),
                Field("mirror", Object(), read_only=True,
                      description="the mirror's progress: status, synced_at, last_error"),
            ],
            actions=[Action("adopt", self.adopt, request_schema=ADOPT_SCHEMA,
                            summary="Hand verified legacy upstream records to the mirror"),
                     Action("resolve", self.resolve, method="GET",
                            permission="dns.domain.read", parameters=resolve.PARAMETERS,
                            response_schema=resolve.RESPONSE_SCHEMA,
                            summary="The built-in server's answer for a name of this "
                                    "domain (a real query to it)")])

    def resolve(self, call, record):
        return resolve.resolve(call, record)

    def adopt(self, call, record):
        from appliance.dns.adopt import adopt  # noqa: PLC0415 - needs the mirror client
        return adopt(self.api, call, record)

    def create_record(self, call, body):
        # the ownership check and the insert as one step under the kind's lock (it spans
        # processes: the DBaaS daemon makes its zone under it too), so that two concurrent
        # creations of nested zones by two owners cannot both pass the check
        with self.collection().lock:
            return super().create_record(call, body)

    def prepare_create(self, call, record):
        record["name"] = record["name"].rstrip(".").lower()
        record["mirror"] = None
        # names are create-only, so the rule is needed here only (appliance/tenancy/zones.py)
        zone_rule.check_create(record["name"], record["project_id"],
                               self.collection().records(), self.settings, call.principal)
        return record

    def after_create(self, call, record):
        self.api.resources[RECORDS].collection().insert(zone_records.soa_record(record))

    def after_delete(self, call, record):
        call.store.collection("dns_records").delete_where(
            lambda r: r["domain"] == record["uuid"])


RECORDS = "/v1/dns/domains/<domain>/records"


class Records(Resource):
    def __init__(self, tags="full"):
        self.tags_mode = tags
        fields = [
            Field("domain", Reference("/v1/dns/domains"), create_only=True,
                  description="taken from the path"),
            Field("project_id", UUID(), create_only=True, description="the domain's"),
            Field("type", Enum(*TYPES), required=True, create_only=True),
            Field("ttl", Integer(0, 2 ** 31 - 1), default=3600, nullable=False,
                  description="seconds; 0 (ACME challenges) to 2^31-1"),
            Field("prio", Integer(0, 65535)),
            Field("disabled", Boolean(), default=False, nullable=False),
            Field("record", Object({"type": "object", "required": ["kind", "name"],
                                    "properties": {"kind": {"enum": list(TYPES)}}}),
                  required=True, description="kind (= type), name (relative; @ apex, * "
                                             "wildcard) and the fields of the type"),
        ]
        if tags != "none":
            fields.insert(5, Field("tags", Tags()))
        super().__init__(
            name="Record", path=RECORDS, kind="dns_records", service="dns", policy="record",
            project_scoped=True, parent=("domain", "/v1/dns/domains"), fields=fields,
            description="a record of a domain")
        if tags == "full":
            self.extra_query = {"q": 'tags:"<tag>": records carrying that tag'}

    def filter_query(self, call, records):
        if "q" not in call.query:
            return records
        wanted = set()
        for q in call.query.getall("q"):
            m = _Q.match(q)
            if not m:
                raise BadRequest('q: only tags:"<tag>" is supported')
            wanted.add(m.group(1))
        return [r for r in records if wanted & set(r.get("tags") or ())]

    # ---- checks --------------------------------------------------------------------

    def _check_record(self, type_, record, domain_name):
        if record.get("kind") != type_:
            raise BadRequest(f"record.kind: must equal type ({type_})")
        _CHECKS[type_].check({"record": record})
        record = dict(record, name=record["name"].lower())
        if len(f"{record['name']}.{domain_name}") > 253:
            raise BadRequest("record.name: the full name is longer than 253 characters")
        if type_ == "A":
            try:
                ipaddress.IPv4Address(record["address"])
            except ValueError:
                raise BadRequest("record.address: must be an IPv4 address") from None
        if type_ == "TXT":
            size = len(record["content"].encode())
            if size > TXT_LIMIT:
                raise BadRequest(
                    f"record.content: {size} bytes of UTF-8, at most {TXT_LIMIT} fit in one "
                    "DNS answer; shorten it or split it over several names")
        if type_ == "NS":
            record["content"] = record["content"].rstrip(".").lower()
        if type_ == "SOA":
            if record["name"] != "@":
                raise BadRequest("record.name: an SOA is at the apex (@)")
            record["primary_dns"] = record["primary_dns"].rstrip(".").lower()
        return record

    def _domain(self, call, uuid):
        return call.store.collection("dns_domains").require(uuid)

    def prepare_create(self, call, record):
        domain = self._domain(call, record["domain"])
        record["project_id"] = domain["project_id"]
        record["record"] = self._check_record(record["type"], record["record"], domain["name"])
        self._check_txt_answer(record["domain"], record, None)
        if record["type"] == "SOA" and any(r["type"] == "SOA" for r in
                                           self.collection().by("domain", domain["uuid"])):
            raise Conflict(f"domain {domain['name']} already has its SOA")
        return record

    def prepare_update(self, call, current, changes):
        if "record" in changes:
            domain = self._domain(call, current["domain"])
            changes["record"] = self._check_record(current["type"], changes["record"],
                                                   domain["name"])
        self._check_txt_answer(current["domain"], {**current, **changes}, current["uuid"])
        return changes

    # the TXT answer check and the write under one named lock per domain (a stripe of
    # them), else two records of one name written at once could each fit alone and
    # overflow the answer together
    def create_record(self, call, body):
        given = call.params.get("domain") or (body.get("domain") if isinstance(
            body, dict) else None)
        with self._txt_guard(given):
            return super().create_record(call, body)

    def update_record(self, call, uuid, body):
        current = self.collection().get(str(uuid).lower())
        with self._txt_guard((current or {}).get("domain")):
            return super().update_record(call, uuid, body)

    def _txt_guard(self, domain):
        uuid = str(domain or "").rstrip("/").rsplit("/", 1)[-1].lower()
        stripe = zlib.crc32(uuid.encode()) % TXT_LOCK_STRIPES
        return self.api.store.named_lock(f"dns-txt-{stripe}")

    def _check_txt_answer(self, domain_uuid, record, uuid):
        """The enabled TXT records of one name are one answer, and it must fit in one DNS
        message: 409 if this record would make it too large. Called under `_txt_guard`
        (create_record, update_record); a record written around the API (a restore) that
        overflows it gets SERVFAIL for that name, never a broken message."""
        if record["type"] != "TXT" or record.get("disabled"):
            return
        name = record["record"]["name"]

        def cost(r):
            size = len(str(r["record"].get("content") or "").encode())
            return wire.RR_OVERHEAD + wire.txt_rdata_length(size)
        others = [r for r in self.collection().by("domain", domain_uuid)
                  if r["type"] == "TXT" and not r.get("disabled") and r["uuid"] != uuid
                  and str(r["record"].get("name", "")).lower() == name]
        total = cost(record) + sum(cost(r) for r in others)
        if others and total > wire.TXT_ANSWER_LIMIT:
            raise Conflict(
                f"record.content: the {len(others) + 1} TXT records of {name} would take "
                f"{total} bytes in a DNS answer, more than the {wire.TXT_ANSWER_LIMIT} one "
                "message can carry; shorten or delete one of the others first")

    def check_delete(self, call, record):
        if record["type"] == "SOA":
            raise Forbidden("an SOA record goes only with its domain")

    # ---- the zone serial (appliance/dns/records.py) ------------------------------------

    def after_create(self, call, record):
        if record["type"] != "SOA":
            zone_records.bump_serial(self.collection(), record["domain"])

    def after_update(self, call, before, after):
        if zone_records.changes_serial(before, after):
            zone_records.bump_serial(self.collection(), after["domain"])

    def after_delete(self, call, record):
        zone_records.bump_serial(self.collection(), record["domain"])


def all_resources(settings):
    return [Domains(settings), Records(settings.get("dns_tags", "full"))]
