"""Adoption of legacy upstream records by the realm mirror (spec 2.8 rule 4).

`POST /v1/dns/domains/<uuid>/actions/adopt/invoke` with `{"records": [<upstream record
uuid>, ...]}` (at most MAX_RECORDS). An administrator action: the mark is written with the
mirror's upstream credentials, so the caller must hold every permission (`*.*.*`), not
only the domain's.

A record is adopted only when all of these hold, checked against the upstream at the time
of the request:
- the upstream domain of the same name holds a record with that uuid, and it has tags
  (an upstream without tags cannot carry the mark: rule 5);
- it carries no `realm:` tag: records of other realms are never touched, and one already
  carrying our mark is reported as adopted without a write;
- this local domain has a record with the same uuid, the same type and the same record
  content (`record`: name and the fields of its type). That verified origin, together with
  the explicit request, is the proof: the uuid alone or the content alone is not.
Then the record is PUT upstream with its tags plus `realm:<realm_uuid>`, keeping its other
tags; from then on the mirror manages it (updates it to follow the local record, including
its tags, and deletes it with the local record).

The answer is 200 with one entry per requested uuid: `{"uuid", "result": "adopted" |
"refused", "reason"}`, plus the counts. A failure of the upstream itself (no answer, 5xx,
refused login) is 502 and nothing more is tried.
"""

from appliance.api.errors import ApiError, BadRequest, Conflict, Forbidden
from appliance.api.fields import UUID_RE

from .mirror import is_realm_tag, mark_of
from .upstream import UpstreamError, upstream_from_settings

MAX_RECORDS = 500

REQUEST_SCHEMA = {
    "type": "object", "required": ["records"], "additionalProperties": False,
    "properties": {"records": {"type": "array", "maxItems": MAX_RECORDS, "items": {
        "type": "string", "format": "uuid"}}}}
RESPONSE_SCHEMA = {
    "type": "object", "properties": {
        "domain": {"type": "string"}, "adopted": {"type": "integer"},
        "refused": {"type": "integer"},
        "results": {"type": "array", "items": {"type": "object", "properties": {
            "uuid": {"type": "string"}, "result": {"enum": ["adopted", "refused"]},
            "reason": {"type": ["string", "null"]}}}}}}


class BadGateway(ApiError):
    status, type = 502, "BadGateway"


def _requested(body):
    if body is None or not isinstance(body, dict):
        raise BadRequest('body must be {"records": [<upstream record uuid>, ...]}')
    unknown = sorted(set(body) - {"records"})
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}")
    uuids = body.get("records")
    if not isinstance(uuids, list) or not uuids:
        raise BadRequest("records: a non-empty list of upstream record uuids is required")
    if len(uuids) > MAX_RECORDS:
        raise BadRequest(f"records: at most {MAX_RECORDS} per request")
    for value in uuids:
        if not isinstance(value, str) or not UUID_RE.match(value):
            raise BadRequest(f"records: {value!r} is not a uuid")
    seen, out = set(), []
    for value in uuids:
        value = value.lower()
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out


def _content(record):
    return {"type": record.get("type"), "record": record.get("record")}


def adopt(api, call, domain_record):
    """The action handler: see the module docstring."""
    principal = call.principal
    if principal is not None and not principal.allows("*.*.*"):
        raise Forbidden("adopting upstream records is an administrator action")
    uuids = _requested(call.body)
    settings = api.settings
    realm = str(settings.get("realm_uuid") or "").lower()
    upstream = upstream_from_settings(settings)
    if upstream is None or not realm:
        raise Conflict("the DNS mirror is not configured (mirror_url and realm_uuid)")
    mark = mark_of(realm)
    name = domain_record["name"]
    local = {r["uuid"]: r for r in call.store.collection("dns_records").by(
        "domain", domain_record["uuid"])}
    results = []

    def answer(uuid, result, reason):
        results.append({"uuid": uuid, "result": result, "reason": reason})

    try:
        zone = upstream.find_domain(name)
        if zone is None:
            for uuid in uuids:
                answer(uuid, "refused", f"the upstream has no domain {name}")
        else:
            for uuid in uuids:
                _adopt_one(upstream, zone["uuid"], uuid, local.get(uuid), mark, answer)
    except UpstreamError as e:
        if e.failure or e.status in (401, 403):
            raise BadGateway(f"the upstream failed: {e.message}") from None
        raise
    adopted = sum(r["result"] == "adopted" for r in results)
    return {"domain": name, "adopted": adopted, "refused": len(results) - adopted,
            "results": results}


def _adopt_one(upstream, zone, uuid, local, mark, answer):
    if local is None:
        return answer(uuid, "refused", "this domain has no local record with this uuid: "
                                       "its origin cannot be verified")
    if local.get("type") == "SOA":
        return answer(uuid, "refused", "SOA records are never mirrored")
    try:
        theirs = upstream.get_record(zone, uuid)
    except UpstreamError as e:
        if e.status == 404:
            return answer(uuid, "refused", "no record with this uuid in the upstream domain")
        raise
    if not isinstance(theirs, dict) or "tags" not in theirs:
        return answer(uuid, "refused", "the upstream has no tags, so it cannot carry the "
                                       "realm mark (rule 5)")
    tags = list(theirs.get("tags") or ())
    if mark in tags:
        return answer(uuid, "adopted", "already carries the mark")
    realms = [t for t in tags if is_realm_tag(t)]
    if realms:
        return answer(uuid, "refused", f"belongs to {realms[0]}; records of other realms "
                                       f"are never touched")
    if _content(theirs) != _content(local):
        differs = [k for k in ("type", "record") if theirs.get(k) != local.get(k)]
        return answer(uuid, "refused", f"the upstream record differs from the local one in "
                                       f"{' and '.join(differs)}: its origin is not verified")
    try:
        upstream.update_record(zone, uuid, {"tags": tags + [mark]})
    except UpstreamError as e:
        if e.failure or e.status in (401, 403):
            raise
        return answer(uuid, "refused", f"the upstream refused the mark ({e.status}): "
                                       f"{e.detail}")
    return answer(uuid, "adopted", None)
