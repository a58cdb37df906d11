"""`GET /v1/audit/`: who reads the audit trail, and how it is filtered (docs/audit.md).

The trail is recorded by the API framework (appliance/api/audit.py); reading it needs the
tenant rule (`is_platform`), which lives above the framework, hence this module. The
platform (admins) reads every entry; a project's owner (the permission `audit.entry.read`,
which the built-in owner role carries and the reader role does not) reads the entries of
its own project only; a filter naming another project is 403, as for any listing.
"""

import collections
import datetime
import heapq
import itertools
import threading

import orjson

from appliance.api.audit import format_time, line_key, needle
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


def _bytes_time(query, name):
    return format_time(_time(name, query[name])).encode() if name in query else None


def _keyed(lines, query):
    """(order key, line) of the lines inside since/until, compared as text: the writer's
    time text has one width, so its order is the time's."""
    since, until = _bytes_time(query, "since"), _bytes_time(query, "until")
    for line in lines:
        key = line_key(line)[0]
        if key is None:
            continue
        if (since is not None and key[0] < since) or (until is not None and key[0] >= until):
            continue
        yield key, line


class _Reading:
    """One read's plan over the segments: which may hold an answer (their sidecar
    summaries against the filters), in which order to read them, and when the page is
    sure, so that the rest stay unread."""

    def __init__(self, trail, query, project, matches, limit, reverse):
        self.trail, self.query, self.project = trail, query, project
        self.matches, self.limit, self.reverse = matches, limit, reverse
        self.needles = _needles(query, project)
        self.projects = {project} if project is not None else (
            {p.lower() for p in query.getall("project_id")} or None)
        self.kinds = set(query.getall("kind")) or None
        self.actors = set(query.getall("actor")) or None
        self.methods = {m.upper() for m in query.getall("method")} or None
        self.since, self.until = _bytes_time(query, "since"), _bytes_time(query, "until")

    def _in_time(self, low, high):
        return not ((self.since is not None and high < self.since) or
                    (self.until is not None and low >= self.until))

    def may_hold(self, summary):
        """Whether a segment may hold an entry that the filters pass."""
        if summary is None:
            return True
        if summary.first is None:
            return False
        for wanted, present in ((self.projects, summary.projects),
                                (self.kinds, summary.kinds),
                                (self.actors, summary.actors),
                                (self.methods, summary.methods)):
            if wanted is not None and not wanted & present:
                return False
        return True

    def may_hold_row(self, summary):
        """Whether a segment may hold a row that the project and kind filters let
        through (a marker need not match the actor and method filters)."""
        for wanted, present in ((self.projects, summary.projects),
                                (self.kinds, summary.kinds)):
            if wanted is not None and not wanted & present:
                return False
        return True

    def candidates(self, marker_time=None):
        """(path, start, end, lowest time, highest time) of the stretches of segments to
        read, in the order to read them: a segment being written (no summary) is read
        whole and first, as its times are not known."""
        chosen = []
        for path in self.trail.segments():
            summary = self.trail.summary(path)
            if summary is None:
                chosen.append((path, 0, None, b"", b"\xff"))
                continue
            wanted, row_wanted = self.may_hold(summary), False
            if marker_time is not None:
                row_wanted = wanted or self.may_hold_row(summary)
            if not (wanted or row_wanted):
                continue
            for start, end, low, high in summary.stretches():
                if not self._in_time(low, high):
                    continue
                take = wanted and (marker_time is None or (
                    high >= marker_time if not self.reverse else low <= marker_time))
                # the stretch that may hold the marker's own line, to find its place
                if take or (row_wanted and low <= marker_time <= high):
                    chosen.append((path, start, end, low, high))
        if self.reverse:
            chosen.sort(key=lambda c: c[4], reverse=True)
        else:
            chosen.sort(key=lambda c: c[3])
        return chosen

    def find_marker(self, wanted):
        """The order key of the entry `wanted` names, among the lines this read could
        page from (None when there is none)."""
        needles = self.needles + [(needle("uuid", wanted.decode()),)]
        for path, start, end, _, _ in self.candidates():
            for key, _line in _keyed(self.trail.segment_lines(path, needles, start, end),
                                     self.query):
                if key[1] == wanted:
                    return key
        return None

    def verdict(self, row):
        """The row's entry when the filters pass it, else False (decided once a row)."""
        if row[2] is None:
            try:
                item = orjson.loads(row[1])
            except orjson.JSONDecodeError:
                item = None
            row[2] = item if isinstance(item, dict) and (
                self.project is None or item.get("project_id") == self.project) and \
                self.matches(item) else False
        return row[2]

    def page(self, marker_key):
        """[(key, entry)] of the page after `marker_key`; raises when the marker is not
        among the rows read. The rows wait in a heap until no unread stretch can come
        before them; then they are final, and only the final rows after the marker are
        parsed and counted: each row is parsed at most once, and the reading stops when
        the final rows fill the page."""
        chosen = self.candidates(None if marker_key is None else marker_key[0])
        after = (lambda key: True) if marker_key is None else (
            (lambda key: key < marker_key) if self.reverse else (lambda key: key > marker_key))
        order = _Descending if self.reverse else tuple
        waiting, final, found, seen_marker = [], [], 0, False
        sequence = itertools.count()
        for i, (path, start, end, _, _) in enumerate(chosen):
            for key, line in _keyed(self.trail.segment_lines(path, self.needles, start, end),
                                    self.query):
                seen_marker = seen_marker or key == marker_key
                heapq.heappush(waiting, (order(key), next(sequence), [key, line, None]))
            if self.limit is None or i + 1 == len(chosen):
                continue
            # every row still unread is at or past the next stretch's end nearest to us
            following = chosen[i + 1]
            bound = following[4] if self.reverse else following[3]
            while waiting and ((waiting[0][2][0][0] > bound) if self.reverse else
                               (waiting[0][2][0][0] < bound)):
                row = heapq.heappop(waiting)[2]
                final.append(row)
                if after(row[0]) and self.verdict(row):
                    found += 1
            if found >= self.limit:
                break
        if marker_key is not None and not seen_marker:
            raise BadRequest("page_marker names no entry the trail still keeps")
        page = []
        for row in itertools.chain(final, (entry[2] for entry in sorted(waiting))):
            if not after(row[0]):
                continue
            item = self.verdict(row)
            if item:
                page.append((row[0], item))
                if self.limit is not None and len(page) == self.limit:
                    break
        return page


class _Descending:
    """An order key compared the other way round (a heap of the newest first)."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __lt__(self, other):
        return other.key < self.key

    def __eq__(self, other):
        return self.key == other.key


# the order keys of the markers this process handed out, so that the next page starts
# from its place instead of searching for it (an unknown marker is searched for)
MARKERS_KEPT = 4096


def register(api):
    trail = api.trail
    markers = collections.OrderedDict()
    markers_lock = threading.Lock()
    _export_metrics(trail)

    def list_entries(call):
        """The segments whose sidecars say they may hold an answer are read in order
        until the page is sure; their lines are ordered and paged from their bytes, and
        only the lines of the page (and those an actor or method filter must read) are
        parsed."""
        query = call.query
        project = _visible_project(call)
        matches = _matcher(query)
        limit, reverse = _limit(query), _order(query)
        trail.flush()          # what this process recorded so far is in the files
        reading = _Reading(trail, query, project, matches, limit, reverse)
        marker_key = None
        marker = query.get("page_marker")
        if marker:
            wanted = marker.lower().encode()
            with markers_lock:
                marker_key = markers.get(wanted)
            if marker_key is None:
                marker_key = reading.find_marker(wanted)
                if marker_key is None:
                    raise BadRequest("page_marker names no entry the trail still keeps")
        page = reading.page(marker_key)
        headers = {}
        if limit is not None:
            headers["X-Pagination-Limit"] = str(limit)
            if len(page) == limit:
                last_key, last = page[-1]
                headers["X-Pagination-Marker"] = last["uuid"]
                with markers_lock:
                    markers[last_key[1]] = last_key
                    markers.move_to_end(last_key[1])
                    while len(markers) > MARKERS_KEPT:
                        markers.popitem(last=False)
        return Reply([item for _, item in page], 200, headers)

    api.route("GET", "/v1/audit", list_entries, permission=PERMISSION, tag="audit",
              summary="List audit entries: every state-changing request and every login "
                      "(admins: all; a project's owner: its project's)",
              response_schema={"type": "array", "items": {"type": "object"}},
              query_params=[_Param(name) for name in FILTERS])


# ---- metrics: the trail's losses and size (docs/metrics.md) ------------------------------

_metrics_lock = threading.Lock()
_lost_counter = None
_exported = None          # the collector of the trail's size, once registered


def _export_metrics(trail):
    """Count the trail's lost entries in `appliance_audit_entries_lost_total` (a counter
    in the multiprocess files: the API process writes it, the scrape merges it), and serve
    its size and segments, read from its directory at each scrape."""
    global _lost_counter, _exported
    with _metrics_lock:
        if _lost_counter is None:
            from appliance.metrics import Counter  # noqa: PLC0415 (after metrics.enable)
            _lost_counter = Counter(
                "appliance_audit_entries_lost", "Audit entries that could not be written "
                "(a full disk, a folder gone): each is also logged at ERROR")
        counter = _lost_counter
        trail.on_lost = counter.inc
        if _exported is None:
            from prometheus_client.registry import REGISTRY  # noqa: PLC0415
            _exported = _TrailSize()
            REGISTRY.register(_exported)
        _exported.trail = trail     # the latest API of this process (tests make several)


class _TrailSize:
    """appliance_audit_bytes and appliance_audit_segments, computed at the scrape (one
    listing and a stat a segment): every process writing the trail shares one directory,
    so its size is not any one process's to count."""

    trail = None

    def collect(self):
        from prometheus_client.metrics_core import GaugeMetricFamily  # noqa: PLC0415
        trail = self.trail
        if trail is None:
            return
        size, count = trail.usage()
        yield GaugeMetricFamily("appliance_audit_bytes", "Bytes of the audit trail's kept "
                                "segments (their index sidecars not counted)", value=size)
        yield GaugeMetricFamily("appliance_audit_segments", "Segment files the audit "
                                "trail keeps", value=count)
