"""`GET /v1/audit/`: who reads the audit trail, and how it is filtered (docs/audit.md).

The trail is recorded by the API framework (appliance/api/audit.py); reading it needs the
tenant rule (`is_platform`), which lives above the framework, hence this module. The
platform (admins) reads every entry; a project's owner (the permission `audit.entry.read`,
which the built-in owner role carries and the reader role does not) reads the entries of
its own project only; a filter naming another project is 403, as for any listing.
"""

import datetime

from appliance.api.audit import needle
from appliance.api.errors import BadRequest, Forbidden
from appliance.api.listing import RESERVED, sort_and_page
from appliance.api.routing import Reply
from appliance.tenancy import is_platform

PERMISSION = "audit.entry.read"
FILTERS = ("actor", "project_id", "kind", "since", "until", "method")


class _Param:
    """A query parameter as the OpenAPI document lists it."""

    def __init__(self, name):
        self.name = name


class _Entries:
    """What the convention's paging needs of a collection: no sortable field but the
    defaults, and the entry a marker names."""

    def __init__(self, entries):
        self._by_uuid = {e.get("uuid"): e for e in entries}

    def field(self, name):
        return None

    def collection(self):
        return self

    def get(self, uuid):
        return self._by_uuid.get(uuid)


def _time(name, text):
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace(
            "z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{name} must be an RFC 3339 time such as "
                         "2026-11-26T08:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment


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


def register(api):
    trail = api.trail

    def list_entries(call):
        project = _visible_project(call)
        matches = _matcher(call.query)
        trail.flush()          # what this process recorded so far is in the files
        entries = [e for e in trail.entries(_needles(call.query, project))
                   if (project is None or e.get("project_id") == project) and matches(e)]
        entries.sort(key=lambda e: (str(e.get("created_at")), str(e.get("uuid"))))
        headers = {}
        page = sort_and_page(_Entries(entries), entries, call.query,
                             lambda k, v: headers.__setitem__(k, v))
        return Reply(page, 200, headers)

    api.route("GET", "/v1/audit", list_entries, permission=PERMISSION, tag="audit",
              summary="List audit entries: every state-changing request and every login "
                      "(admins: all; a project's owner: its project's)",
              response_schema={"type": "array", "items": {"type": "object"}},
              query_params=[_Param(name) for name in FILTERS])
