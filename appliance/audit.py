"""`GET /v1/audit/`: who reads the audit trail, and how it is filtered (docs/audit.md).

The trail is recorded by the API framework (appliance/api/audit.py); reading it needs the
tenant rule (`is_platform`), which lives above the framework, hence this module. The
platform (admins) reads every entry; a project's owner (the permission `audit.entry.read`,
which the built-in owner role carries and the reader role does not) reads the entries of
its own project only; a filter naming another project is 403, as for any listing.
"""

import datetime
import itertools

import orjson

from appliance.api.audit import format_time, needle, order_key
from appliance.api.errors import BadRequest, Forbidden
from appliance.api.fields import UUID_RE
from appliance.api.listing import MAX_PAGE, RESERVED
from appliance.api.routing import Reply
from appliance.tenancy import is_platform

PERMISSION = "audit.entry.read"
FILTERS = ("actor", "project_id", "kind", "since", "until", "method")


class _Param:
    """A query parameter as the OpenAPI document lists it."""

    def __init__(self, name):
        self.name = name


def _time(name, text):
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace(
            "z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{name} must be an RFC 3339 time such as "
                         "2026-11-26T08:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    # in UTC: the entries' time text is compared with this one's
    return moment.astimezone(datetime.timezone.utc)


def _entry_time(item):
    try:
        return _time("created_at", str(item.get("created_at")))
    except BadRequest:
        return None


def _matcher(query):
    unknown = sorted(set(query.keys()) - set(FILTERS) - set(RESERVED))
    if unknown:
        raise BadRequest(f"unknown filter field {unknown[0]!r}; filterable fields: "
                         + ", ".join(FILTERS))
    actors = set(query.getall("actor"))
    projects = {p.lower() for p in query.getall("project_id")}
    kinds = set(query.getall("kind"))
    methods = {m.upper() for m in query.getall("method")}
    since = _time("since", query["since"]) if "since" in query else None
    until = _time("until", query["until"]) if "until" in query else None

    def matches(item):
        actor = item.get("actor") or {}
        if actors and not actors & {actor.get("id"), actor.get("name"),
                                    (item.get("login") or {}).get("username")}:
            return False
        if projects and item.get("project_id") not in projects:
            return False
        if kinds and item.get("kind") not in kinds:
            return False
        if methods and item.get("method") not in methods:
            return False
        if since is not None or until is not None:
            moment = _entry_time(item)
            if moment is None or (since is not None and moment < since) or (
                    until is not None and moment >= until):
                return False
        return True
    return matches


def _needles(query, project):
    """What a line must contain to be worth parsing: its project and kind, when filtered."""
    needles = []
    projects = {project} if project is not None else {p.lower() for p in
                                                       query.getall("project_id")}
    if projects:
        needles.append(tuple(needle("project_id", p) for p in projects))
    kinds = query.getall("kind")
    if kinds:
        needles.append(tuple(needle("kind", k) for k in kinds))
    return needles


def _visible_project(call):
    """None: every entry; else the one project whose entries the caller may read."""
    principal = call.principal
    if is_platform(principal):
        return None
    project = getattr(principal, "project_id", None)
    if project is None:
        raise Forbidden("the audit trail is read by admins, and by a project's owner with "
                        "a token scoped to the project")
    for asked in call.query.getall("project_id"):
        if asked.lower() != project:
            raise Forbidden(f"filtering by project {asked} is not allowed for this token")
    return project


def _limit(query):
    text = query.get("page_limit")
    if text is None:
        if query.get("page_marker"):
            raise BadRequest("page_marker needs page_limit")
        return None
    try:
        limit = int(text)
    except ValueError:
        raise BadRequest("page_limit must be an integer") from None
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"page_limit must be between 1 and {MAX_PAGE}")
    marker = query.get("page_marker")
    if marker and not UUID_RE.match(marker):
        raise BadRequest("page_marker must be the uuid of the last item seen")
    return limit


def _order(query):
    """True for newest first."""
    if query.get("sort_key") not in (None, "created_at"):
        raise BadRequest("the audit trail is sorted by created_at only")
    direction = query.get("sort_dir", "asc")
    if direction not in ("asc", "desc"):
        raise BadRequest("sort_dir must be asc or desc")
    return direction == "desc"


def _keyed(lines, query):
    """(order key, line) of the lines inside since/until, compared as text: the writer's
    time text has one width, so its order is the time's."""
    since = format_time(_time("since", query["since"])).encode() if "since" in query else None
    until = format_time(_time("until", query["until"])).encode() if "until" in query else None
    for line in lines:
        key = order_key(line)
        if key is None:        # not the writer's form: read it to know its place
            try:
                item = orjson.loads(line)
                key = (str(item["created_at"]).encode(), str(item["uuid"]).encode())
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
        if (since is not None and key[0] < since) or (until is not None and key[0] >= until):
            continue
        yield key, line


def register(api):
    trail = api.trail

    def list_entries(call):
        """Lines are ordered and paged from their bytes; only the lines of the page (and
        those an actor or method filter must read) are parsed."""
        query = call.query
        project = _visible_project(call)
        matches = _matcher(query)
        limit, reverse = _limit(query), _order(query)
        trail.flush()          # what this process recorded so far is in the files
        rows = sorted(_keyed(trail.lines(_needles(query, project)), query),
                      key=lambda row: row[0], reverse=reverse)
        start = 0
        marker = query.get("page_marker")
        if marker:
            wanted = marker.lower().encode()
            start = next((i + 1 for i, (key, _) in enumerate(rows) if key[1] == wanted),
                         None)
            if start is None:
                raise BadRequest("page_marker names no entry the trail still keeps")
        page = []
        for _, line in itertools.islice(rows, start, None):
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(item, dict) and (project is None or item.get(
                    "project_id") == project) and matches(item):
                page.append(item)
                if limit is not None and len(page) == limit:
                    break
        headers = {}
        if limit is not None:
            headers["X-Pagination-Limit"] = str(limit)
            if len(page) == limit:
                headers["X-Pagination-Marker"] = page[-1]["uuid"]
        return Reply(page, 200, headers)

    api.route("GET", "/v1/audit", list_entries, permission=PERMISSION, tag="audit",
              summary="List audit entries: every state-changing request and every login "
                      "(admins: all; a project's owner: its project's)",
              response_schema={"type": "array", "items": {"type": "object"}},
              query_params=[_Param(name) for name in FILTERS])
