"""The DNS realm mirror: an upstream client and the sync of one domain (spec 2.8).

The upstream is another appliance's API, or any API of the same shape. `Upstream` talks
to it over urllib: a token by password grant at <mirror_url>/v1/iam/clients/default/
actions/get_token/invoke, refreshed (refresh grant, else password grant again) before it
expires and once more on a 401, JSON bodies both ways.

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

import base64
import datetime
import http.client
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
TOKEN_PATH = "/v1/iam/clients/default/actions/get_token/invoke"
DOMAINS = "/v1/dns/domains"
# a refused or unsupported tag filter is tried again after this long (spec 2.8 rule 6).
# Read at call time, so a test may patch it; the daemon takes a setting over it.
FILTER_RETRY_SECONDS = 3600.0
TIMEOUT_SECONDS = 10.0
TOKEN_MARGIN_SECONDS = 30.0
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


# ---- the upstream client ----------------------------------------------------------------

class UpstreamError(Exception):
    """An upstream call that did not succeed. `status` is the HTTP status, None when no
    answer came at all (refused connection, timeout, broken response)."""

    def __init__(self, message, status=None, body=None):
        super().__init__(message)
        self.message, self.status, self.body = message, status, body

    @property
    def detail(self):
        """The upstream's own words (its error message), else the whole message."""
        return Upstream._message(self.status, self.body) if self.body else self.message

    @property
    def failure(self):
        """The upstream itself failed (5xx or no answer): retry later, never a refusal."""
        return self.status is None or self.status >= 500

    @property
    def refusal(self):
        """A 400 to the request itself (for the tag filter: the query is not supported)."""
        return self.status == 400


class AuthError(UpstreamError):
    """Login at the upstream failed (wrong credentials, no credentials). Always a failure
    of the pass, whatever its status: a 400 invalid_grant is not a filter refusal."""

    @property
    def refusal(self):
        return False


class Upstream:
    def __init__(self, url, username, password, *, scope="", timeout=TIMEOUT_SECONDS,
                 clock=time.monotonic):
        self.url = (url or "").rstrip("/")
        self.username, self._password = username, password
        self.scope = scope or ""
        self.timeout = timeout
        self.clock = clock
        self._access = None
        self._access_until = 0.0
        self._refresh = None
        self._refresh_until = 0.0
        self.project_id = None
        self._opener = urllib.request.build_opener()

    def __repr__(self):
        return f"<Upstream {self.url} as {self.username}>"

    # -- transport ---------------------------------------------------------------------

    def _send(self, method, path, body=None, query=None, token=None):
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        headers = {"Accept": "application/json", "User-Agent": "appliance-mirror"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                e.close()
            return e.code, raw
        except urllib.error.URLError as e:
            raise UpstreamError(f"cannot reach the upstream {self.url}: {e.reason}") from None
        except (OSError, http.client.HTTPException, socket.timeout) as e:
            raise UpstreamError(f"cannot reach the upstream {self.url}: "
                                f"{type(e).__name__}: {e}") from None

    @staticmethod
    def _decode(raw):
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")[:200]

    @staticmethod
    def _message(status, body):
        if isinstance(body, dict):
            text = body.get("message") or body.get("error_description") or body.get("error")
            if text:
                return str(text)
        return str(body)[:200] if body else f"HTTP {status}"

    # -- token -------------------------------------------------------------------------

    def _grant(self, params):
        status, raw = self._send("POST", TOKEN_PATH, params)
        body = self._decode(raw)
        if status != 200 or not isinstance(body, dict) or "access_token" not in body:
            if status is not None and status >= 500:
                raise UpstreamError(f"upstream token endpoint failed ({status}): "
                                    f"{self._message(status, body)}", status, body)
            what = body.get("error", "") if isinstance(body, dict) else ""
            raise AuthError(f"login at the upstream as {self.username!r} failed ({status}"
                            f"{' ' + what if what else ''}): {self._message(status, body)}",
                            status, body)
        now = self.clock()
        expires_in = float(body.get("expires_in") or 300)
        self._access = body["access_token"]
        self._access_until = now + expires_in - min(TOKEN_MARGIN_SECONDS, expires_in / 5)
        self._refresh = body.get("refresh_token")
        refresh_in = float(body.get("refresh_expires_in") or 0)
        self._refresh_until = now + refresh_in - min(TOKEN_MARGIN_SECONDS, refresh_in / 5)
        self.project_id = _project_of(body) or ADMIN_PROJECT
        return self._access

    def token(self):
        """A valid access token: the cached one, else refreshed, else a new login."""
        now = self.clock()
        if self._access and now < self._access_until:
            return self._access
        if self._refresh and now < self._refresh_until:
            try:
                return self._grant({"grant_type": "refresh_token",
                                    "refresh_token": self._refresh})
            except AuthError:
                pass          # revoked or expired early: log in again
        if not self.username or self._password is None:
            raise AuthError("mirror_username and mirror_password are not set")
        params = {"grant_type": "password", "username": self.username,
                  "password": self._password}
        if self.scope:
            params["scope"] = self.scope
        return self._grant(params)

    def forget_token(self):
        self._access, self._access_until = None, 0.0

    # -- JSON calls --------------------------------------------------------------------

    def call(self, method, path, body=None, query=None):
        """The decoded answer of a 2xx; UpstreamError otherwise. A 401 gets one new login."""
        for attempt in (1, 2):
            status, raw = self._send(method, path, body, query, self.token())
            if status == 401 and attempt == 1:
                self.forget_token()
                self._refresh = None
                continue
            break
        decoded = self._decode(raw)
        if not 200 <= status < 300:
            raise UpstreamError(f"upstream {method} {path} answered {status}: "
                                f"{self._message(status, decoded)}", status, decoded)
        return decoded

    # -- DNS ---------------------------------------------------------------------------

    def find_domain(self, name):
        """The upstream domain `name` of the mirror's own project, or None. One of
        another project (an admin's credentials see every project's) is never written
        into: UpstreamError 409. An upstream that shows no project_id cannot tell."""
        found = self.call("GET", DOMAINS + "/", query={"name": name})
        for domain in found or ():
            if not isinstance(domain, dict):
                continue
            if str(domain.get("name", "")).rstrip(".").lower() == name:
                owner = domain.get("project_id")
                if owner is not None and self.project_id is not None and \
                        owner != self.project_id:
                    raise UpstreamError(
                        f"the upstream domain {name} belongs to project {owner}, not to "
                        f"the mirror's project {self.project_id}: a zone has one owner, "
                        "so the mirror does not write into it", 409)
                return domain
        return None

    def ensure_domain(self, name):
        """The upstream domain of this name, created when missing."""
        domain = self.find_domain(name)
        if domain is not None:
            return domain, False
        self.token()          # so that project_id is known
        try:
            return self.call("POST", DOMAINS + "/", {"name": name,
                                                     "project_id": self.project_id}), True
        except UpstreamError as e:
            if e.status != 409:
                raise
            refused = e
        domain = self.find_domain(name)      # created meanwhile by someone else
        if domain is None:
            # the upstream's own zone rule (a zone of another owner covers the name), or
            # a domain of that name the mirror's credentials cannot see
            raise UpstreamError(f"the upstream refused domain {name}: {refused.detail}",
                                409, refused.body)
        return domain, False

    def records_path(self, domain_uuid):
        return f"{DOMAINS}/{domain_uuid}/records"

    def list_records(self, domain_uuid, tag=None):
        query = {"q": f'tags:"{tag}"'} if tag is not None else None
        found = self.call("GET", self.records_path(domain_uuid) + "/", query=query)
        if not isinstance(found, list):
            raise UpstreamError(f"record listing of domain {domain_uuid} is not a list", 502)
        return found

    def get_record(self, domain_uuid, uuid):
        return self.call("GET", f"{self.records_path(domain_uuid)}/{uuid}")

    def create_record(self, domain_uuid, body):
        return self.call("POST", self.records_path(domain_uuid) + "/", body)

    def update_record(self, domain_uuid, uuid, changes):
        return self.call("PUT", f"{self.records_path(domain_uuid)}/{uuid}", changes)

    def delete_record(self, domain_uuid, uuid):
        return self.call("DELETE", f"{self.records_path(domain_uuid)}/{uuid}")


def _project_of(token_body):
    """The project a token is scoped to: its `scope`, else its `project_id` claim."""
    scope = token_body.get("scope") or ""
    if scope.startswith("project:"):
        return scope.split(":", 1)[1]
    try:
        payload = token_body["access_token"].split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return claims.get("project_id")
    except (KeyError, IndexError, ValueError, AttributeError):
        return None


def extra_setting(settings, key):
    """A mirror setting that appliance/config.py may not declare: the setting when present,
    else the APPLIANCE_<KEY> variable, else None."""
    value = settings.get(key)
    if value in (None, ""):
        value = os.environ.get("APPLIANCE_" + key.upper())
    return None if value in (None, "") else value


def upstream_from_settings(settings):
    """The client for the configured upstream, or None when the mirror is not configured."""
    if not settings.get("mirror_url"):
        return None
    return Upstream(settings["mirror_url"], settings.get("mirror_username"),
                    settings.get("mirror_password"),
                    scope=extra_setting(settings, "mirror_scope") or "")


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
    zone = up_domain["uuid"]

    # -- read (rules 6 and 7) --
    filtered = False
    if memo.filter_due(now):
        try:
            listed = upstream.list_records(zone, tag=mark)
            filtered = True
            if memo.tag_filter != "supported":
                logger.info("domain %s: the upstream supports the tag filter", name)
            memo.tag_filter, memo.filter_retry_at, memo.tags_supported = "supported", None, True
        except UpstreamError as e:
            if not e.refusal:
                raise               # a failure, never mistaken for a refusal
            memo.filter_retry_at = now + retry
            first = memo.tag_filter not in ("refused", "unsupported")
            memo.tag_filter = "unsupported" if memo.tags_supported is False else "refused"
            logger.log(logging.INFO if first else logging.DEBUG,
                       "domain %s: the upstream refused the tag filter (%s); reading the "
                       "whole zone, filter retried in %.0f s", name, e.detail, retry)
    if not filtered:
        listed = upstream.list_records(zone)
        if listed:
            memo.tags_supported = all("tags" in r for r in listed)
            memo.tag_filter = "refused" if memo.tags_supported else "unsupported"

    tags_ok = memo.tags_supported is not False
    ours, others = {}, {}
    for record in listed:
        if not isinstance(record, dict) or "uuid" not in record:
            continue
        if mark in (record.get("tags") or ()):
            ours[record["uuid"]] = record
        elif not filtered:
            others[record["uuid"]] = record

    # -- plan --
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

    # -- write --
    if plan and on_plan is not None:
        on_plan([(op, (rec or mine)["uuid"]) for op, rec, mine, _ in plan])
    for op, rec, mine, data in plan:
        try:
            if op == "update":
                upstream.update_record(zone, mine["uuid"], data)
                result.updated += 1
            elif op == "delete":
                try:
                    upstream.delete_record(zone, mine["uuid"])
                    result.deleted += 1
                except UpstreamError as e:
                    if e.status != 404:
                        raise
            elif op == "replace":       # ours, but of another type: type never changes
                upstream.delete_record(zone, mine["uuid"])
                _create(upstream, zone, rec, data, memo, logger, name)
                result.updated += 1
            else:
                _create(upstream, zone, rec, data, memo, logger, name)
                result.created += 1
        except UpstreamError as e:
            if e.failure or e.status not in RECORD_REFUSALS or isinstance(e, AuthError):
                raise
            target = rec if rec is not None else mine
            if op == "create" and e.status == 409:
                result.skip(target, conflict(_holder(upstream, zone, target)))
            else:
                result.skip(target, f"{op} refused by the upstream ({e.status}): {e.detail}")
            logger.debug("domain %s: %s of record %s refused by the upstream: %s", name,
                         op, target.get("uuid"), e.detail)
    if len(result.skipped) > MAX_SKIPPED:
        extra = len(result.skipped) - MAX_SKIPPED
        result.skipped = result.skipped[:MAX_SKIPPED] + [f"... and {extra} more"]
    return result


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
