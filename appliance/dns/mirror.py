"""The DNS realm mirror: an upstream client and the sync of one domain (spec 2.8).

The upstream is another appliance's API, or any API of the same shape; its client is
appliance/dns/upstream.py.

`sync_domain` brings the upstream domain of the same name in line with one local domain:

- the upstream domain is looked up by name and created when missing (in the token's
  project, else the admin project); one of that name in another project is never written
  into (a zone has one owner, docs/security.md), and the upstream's refusal to create it
  (its own zone rule) is the pass's error; local SOA records are never mirrored;
- reading: `q=tags:"realm:<realm_uuid>"` (rule 7); a 400 to that query is a refusal: the
  whole zone is read instead and ownership is still checked by tags when the records carry
  them (rule 6), and the filter is tried again after FILTER_RETRY_SECONDS. Any other error
  (a 5xx, a refused connection, a 401/403) is a failure: it is raised, never taken for a
  refusal;
- an upstream record is ours only if it carries the tag `realm:<realm_uuid>` (rule 1);
  only ours are updated or deleted. A local record whose uuid is taken upstream by a record
  that is not ours (unmarked or of another realm) is reported as skipped, never duplicated
  nor touched (rule 2). The tags written are the local tags without any `realm:` tag, plus
  our mark (rule 2);
- an upstream without tags (records without a `tags` key, or a create refused with a 400
  naming tags while nothing showed tags exist) gets new records unmarked; existing upstream
  records are then neither updated nor removed: the mirror cannot prove they are its own
  (rule 5);
- one record the upstream refuses (400, 404, 409, 413, 422) is reported and the sync goes
  on; a failure of the upstream itself (5xx, connection, 401, 403) aborts the pass.

Record names go through unchanged, so a bare `*` stays the zone wildcard (rule 8).
"""

import datetime
import logging
import time

from .upstream import AuthError, UpstreamError

# a refused or unsupported tag filter is tried again after this long (spec 2.8 rule 6).
# Read at call time, so a test may patch it; the daemon takes a setting over it.
FILTER_RETRY_SECONDS = 3600.0
MAX_SKIPPED = 50
# statuses with which the upstream refuses one record; the sync reports it and goes on
RECORD_REFUSALS = (400, 404, 409, 413, 422)
COMPARED = ("ttl", "prio", "disabled", "record")

log = logging.getLogger("appliance.dns.mirror")


def mark_of(realm_uuid):
    return f"realm:{realm_uuid}"


def is_realm_tag(tag):
    return isinstance(tag, str) and tag.startswith("realm:")


def format_time(epoch):
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text):
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


# ---- the sync of one domain -------------------------------------------------------------

class FilterMemo:
    """What the mirror knows of one upstream domain's tag support, kept across passes (in
    memory, and in the local domain's `mirror` field across restarts)."""

    def __init__(self, tag_filter=None, filter_retry_at=None):
        self.tag_filter = tag_filter            # None, supported, refused, unsupported
        self.filter_retry_at = filter_retry_at  # epoch seconds; None = try the filter
        self.tags_supported = {"supported": True, "refused": True,
                               "unsupported": False}.get(tag_filter)

    @classmethod
    def from_mirror(cls, mirror):
        mirror = mirror if isinstance(mirror, dict) else {}
        tag_filter = mirror.get("tag_filter")
        if tag_filter not in ("supported", "refused", "unsupported"):
            tag_filter = None
        return cls(tag_filter, parse_time(mirror.get("filter_retry_at")))

    def filter_due(self, now):
        return self.filter_retry_at is None or now >= self.filter_retry_at


class Result:
    """The outcome of one pass; filled while it runs, so a failure keeps what was done."""

    def __init__(self):
        self.created = self.updated = self.deleted = 0
        self.skipped = []
        self.skipped_uuids = set()
        self.upstream_domain = None
        self.domain_created = False

    @property
    def changed_upstream(self):
        return bool(self.created or self.updated or self.deleted or self.domain_created)

    def skip(self, record, why):
        name = (record.get("record") or {}).get("name")
        self.skipped_uuids.add(record.get("uuid"))
        self.skipped.append(f"{record.get('type')} {name} ({record.get('uuid')}): {why}")


def desired(local, mark, with_tags):
    """The upstream form of a local record."""
    want = {"type": local["type"], "ttl": local.get("ttl"), "prio": local.get("prio"),
            "disabled": bool(local.get("disabled")), "record": local["record"]}
    if with_tags:
        tags = []
        for tag in local.get("tags") or ():
            if not is_realm_tag(tag) and tag not in tags:
                tags.append(tag)
        want["tags"] = tags + [mark]
    return want


def differences(upstream, want):
    """The fields of `want` the upstream record does not have."""
    changes = {}
    for field in COMPARED:
        if upstream.get(field) != want[field]:
            changes[field] = want[field]
    if "tags" in want and list(upstream.get("tags") or ()) != want["tags"]:
        changes["tags"] = want["tags"]
    return changes


def owner_of(record):
    """Who an upstream record belongs to, for a report."""
    if "tags" not in record:
        return "an upstream record without tags"
    realms = [t for t in record.get("tags") or () if is_realm_tag(t)]
    return f"a record of {realms[0]}" if realms else "an unmarked upstream record"


def conflict(owner):
    """The report of a local record whose uuid is held upstream by a record not ours."""
    hint = " (the adopt action can hand it to the mirror)" if "unmarked" in owner else ""
    return f"the uuid is taken by {owner}; left intact{hint}"


class UpstreamZone:
    """The upstream domain one pass writes to, and what the pass carries along."""

    def __init__(self, upstream, uuid, name, memo, result, logger):
        self.upstream, self.uuid, self.name = upstream, uuid, name
        self.memo, self.result, self.logger = memo, result, logger


def sync_domain(upstream, realm_uuid, domain, local_records, memo, *, now=None,
                filter_retry_seconds=None, on_plan=None, result=None, logger=None):
    """Bring the upstream domain named like `domain` in line with `local_records`.

    `memo` (FilterMemo) is read and updated; `result` (Result) is filled as work is done
    and returned. Raises UpstreamError on a failure of the upstream (the pass is then to be
    retried; what was done so far is in `result`). `on_plan(steps)` is called once before
    the first upstream write, when there is any, with the planned [(operation, uuid)]."""
    logger = logger or log
    result = result if result is not None else Result()
    now = time.time() if now is None else now
    retry = FILTER_RETRY_SECONDS if filter_retry_seconds is None else filter_retry_seconds
    mark = mark_of(realm_uuid)
    name = domain["name"]

    up_domain, created = upstream.ensure_domain(name)
    result.upstream_domain, result.domain_created = up_domain, created
    if created:
        logger.info("created domain %s at the upstream", name)
    zone = UpstreamZone(upstream, up_domain["uuid"], name, memo, result, logger)
    listed, filtered = read_upstream(zone, mark, now, retry)
    ours, others = split_upstream(listed, mark, filtered)
    plan = plan_sync(local_records, ours, others, mark, memo.tags_supported is not False,
                     result)
    if plan and on_plan is not None:
        on_plan([(op, (rec or mine)["uuid"]) for op, rec, mine, _ in plan])
    for op, rec, mine, data in plan:
        apply_step(zone, op, rec, mine, data)
    if len(result.skipped) > MAX_SKIPPED:
        extra = len(result.skipped) - MAX_SKIPPED
        result.skipped = result.skipped[:MAX_SKIPPED] + [f"... and {extra} more"]
    return result


def read_upstream(zone, mark, now, retry):
    """The upstream's records of the zone (rules 6 and 7): ours by the tag filter while it
    is supported or due again, else the whole zone; (records, filtered)."""
    memo, logger = zone.memo, zone.logger
    if memo.filter_due(now):
        try:
            listed = zone.upstream.list_records(zone.uuid, tag=mark)
            if memo.tag_filter != "supported":
                logger.info("domain %s: the upstream supports the tag filter", zone.name)
            memo.tag_filter, memo.filter_retry_at, memo.tags_supported = "supported", None, True
            return listed, True
        except UpstreamError as e:
            if not e.refusal:
                raise               # a failure, never mistaken for a refusal
            memo.filter_retry_at = now + retry
            first = memo.tag_filter not in ("refused", "unsupported")
            memo.tag_filter = "unsupported" if memo.tags_supported is False else "refused"
            logger.log(logging.INFO if first else logging.DEBUG,
                       "domain %s: the upstream refused the tag filter (%s); reading the "
                       "whole zone, filter retried in %.0f s", zone.name, e.detail, retry)
    listed = zone.upstream.list_records(zone.uuid)
    if listed:
        memo.tags_supported = all("tags" in r for r in listed)
        memo.tag_filter = "refused" if memo.tags_supported else "unsupported"
    return listed, False


def split_upstream(listed, mark, filtered):
    """{uuid: record} of the upstream records that are ours (rule 1), and of the others
    (known only when the whole zone was read)."""
    ours, others = {}, {}
    for record in listed:
        if not isinstance(record, dict) or "uuid" not in record:
            continue
        if mark in (record.get("tags") or ()):
            ours[record["uuid"]] = record
        elif not filtered:
            others[record["uuid"]] = record
    return ours, others


def plan_sync(local_records, ours, others, mark, tags_ok, result):
    """The steps [(operation, local record, upstream record, data)] that bring the upstream
    in line; the local records that cannot be mirrored go to `result` as skipped."""
    local = [r for r in local_records if r.get("type") != "SOA"]
    local_ids = {r["uuid"] for r in local}
    plan = []
    for rec in local:
        want = desired(rec, mark, tags_ok)
        mine = ours.get(rec["uuid"])
        if mine is not None:
            if mine.get("type") != rec["type"]:
                plan.append(("replace", rec, mine, want))
            else:
                changes = differences(mine, want)
                if changes:
                    plan.append(("update", rec, mine, changes))
        elif rec["uuid"] in others:
            other = others[rec["uuid"]]
            if not tags_ok:
                if differences(other, want):
                    result.skip(rec, "differs from the upstream record, which is not updated: "
                                     "the upstream has no tags, so the mirror cannot prove the "
                                     "record is its own (rule 5)")
            else:
                result.skip(rec, conflict(owner_of(other)))
        else:
            plan.append(("create", rec, None, want))
    for uuid, mine in ours.items():
        if uuid not in local_ids:
            plan.append(("delete", None, mine, None))
    return plan


def apply_step(zone, op, rec, mine, data):
    """One planned step; a refusal of that one record is reported and the pass goes on, a
    failure of the upstream is raised."""
    result = zone.result
    try:
        write_step(zone, op, rec, mine, data)
    except UpstreamError as e:
        if e.failure or e.status not in RECORD_REFUSALS or isinstance(e, AuthError):
            raise
        target = rec if rec is not None else mine
        if op == "create" and e.status == 409:
            result.skip(target, conflict(_holder(zone.upstream, zone.uuid, target)))
        else:
            result.skip(target, f"{op} refused by the upstream ({e.status}): {e.detail}")
        zone.logger.debug("domain %s: %s of record %s refused by the upstream: %s",
                          zone.name, op, target.get("uuid"), e.detail)


def write_step(zone, op, rec, mine, data):
    upstream, result = zone.upstream, zone.result
    if op == "update":
        upstream.update_record(zone.uuid, mine["uuid"], data)
        result.updated += 1
    elif op == "delete":
        try:
            upstream.delete_record(zone.uuid, mine["uuid"])
            result.deleted += 1
        except UpstreamError as e:
            if e.status != 404:
                raise
    elif op == "replace":       # ours, but of another type: type never changes
        upstream.delete_record(zone.uuid, mine["uuid"])
        _create(upstream, zone.uuid, rec, data, zone.memo, zone.logger, zone.name)
        result.updated += 1
    else:
        _create(upstream, zone.uuid, rec, data, zone.memo, zone.logger, zone.name)
        result.created += 1


def _holder(upstream, zone, record):
    """Who holds a uuid the upstream refused as taken (the filtered read did not show it)."""
    try:
        return owner_of(upstream.get_record(zone, record["uuid"]))
    except UpstreamError as e:
        if e.status == 404:
            return "a record outside this upstream domain"
        if e.failure or e.status in (401, 403):
            raise
        return "an upstream record that is not ours"


def _create(upstream, zone, rec, want, memo, logger, name):
    body = {"uuid": rec["uuid"], **want}
    if memo.tags_supported is False:
        body.pop("tags", None)
    try:
        upstream.create_record(zone, body)
    except UpstreamError as e:
        # no evidence yet that the upstream has tags, and it refuses them: rule 5
        if not (e.status == 400 and "tags" in body and memo.tags_supported is None
                and "tags" in e.detail):
            raise
        logger.info("domain %s: the upstream refuses tags (%s); new records go unmarked",
                    name, e.detail)
        memo.tags_supported = False
        memo.tag_filter = "unsupported"
        body.pop("tags")
        upstream.create_record(zone, body)
