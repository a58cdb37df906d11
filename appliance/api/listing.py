"""Filtering, sorting and marker paging of a collection, as the conventions fix them.

A list starts from the smallest set the store's per-field indexes give for its equality
filters and the caller's visibility (`source`), then applies every other filter to that
set only: the answer is the one a scan of every record gives, in the same default order
(docs/api.md, "How a list is served"). A list asked again while its kind has not
changed comes from `LISTED`, keyed by the kind's version.
"""

import itertools
import threading

from state.collection import Collection, order_key

from .errors import BadRequest, Forbidden
from .fields import FilterError, List, UUID_RE

RESERVED = ("fields", "sort_key", "sort_dir", "page_limit", "page_marker")
MAX_PAGE = 1000
# the field types whose equality filters go through the store's index (Collection.by):
# their values repeat over many records (a parent, an organization, a state), so an index
# costs about one dict entry per record. Free text (a name) stays with the scan: its index
# would hold one group per record (~280 bytes each, ~28 MB at 100,000 records)
INDEXED_TYPES = ("uuid", "reference", "enum", "boolean")
# a filter naming a whole unique key with several values each looks up each combination
MAX_KEY_LOOKUPS = 64


def _sort_value(value):
    # None sorts first; every field holds one type, so values compare among themselves
    return (0, "") if value is None else (1, value)


def parse_filters(resource, query, extra=None):
    """{field: [parsed values]} from the query string; 400 for anything unknown or mistyped."""
    filters = {}
    for name in query.keys():
        if name in RESERVED or name in (extra if extra is not None else resource.extra_query):
            continue
        field = resource.field(name)
        if field is None or not field.filterable:
            raise BadRequest(f"unknown filter field {name!r}; filterable fields: "
                             + ", ".join(f.name for f in resource.filterable_fields()))
        values = []
        for text in query.getall(name):
            try:
                values.append(field.type.parse_filter(text))
            except FilterError as e:
                raise BadRequest(f"filter {name}: {e}") from None
        filters[name] = (field, values)
    return filters


def matches(record, filters):
    for name, (field, wanted) in filters.items():
        value = record.get(name)
        if isinstance(field.type, List):
            if not value or not any(w in value for w in wanted):
                return False
        elif value not in wanted:
            return False
    return True


def _indexable(resource, name, field):
    return (field.type.type_name in INDEXED_TYPES and name != "uuid"
            and (name,) not in resource.unique)


def _union(groups):
    """Records of disjoint groups, each in default order, as one list in default order."""
    if len(groups) == 1:
        return groups[0]
    return sorted(itertools.chain.from_iterable(groups), key=order_key)


def source(resource, collection, filters, visible, parent=None):
    """(records in default order, the filters still to apply to them): the smallest set
    that the uuid filter, a whole unique key, the indexed equality filters, the
    sub-collection's parent (`parent`: (field, uuid)) or the visible projects give, else
    every record. The records are the store's own: read-only. What they must still pass
    beside the filters left (the visibility rule, `filter_query`) is the caller's to
    apply, as on a scan."""
    if not isinstance(collection, Collection):
        # a view computed per request (the Element Manager's parts, the agents' targets):
        # no index to ask, so the scan, as ever
        return (collection.by(*parent) if parent is not None else collection.records(),
                filters)
    candidates = []         # (size, groups, the filter it stands for or None)
    if parent is not None:
        group = collection.by(*parent)
        candidates.append((len(group), [group], None))
    if "uuid" in filters:
        found = [collection.get(u) for u in set(filters["uuid"][1])]
        found = [r for r in found if r is not None]
        candidates.append((len(found), [sorted(found, key=order_key)], "uuid"))
    for fields in resource.unique:
        # a whole unique key given (a name in its project, a username): one record at most
        # per combination of values, through the index the store's writes keep
        if fields not in collection.unique or not all(
                f in filters and not isinstance(filters[f][0].type, List) for f in fields):
            continue
        combos = list(itertools.product(*(set(filters[f][1]) for f in fields)))
        if len(combos) > MAX_KEY_LOOKUPS:
            continue
        try:
            found = [r for r in (collection.by_key(fields, c) for c in combos)
                     if r is not None]
        except TypeError:
            continue
        candidates.append((len(found), [sorted(found, key=order_key)], None))
    for name, (field, wanted) in filters.items():
        if not _indexable(resource, name, field):
            continue
        try:
            groups = [collection.by(name, value) for value in set(wanted)]
        except TypeError:       # a value that cannot be a dict key: the scan decides
            continue
        candidates.append((sum(map(len, groups)), groups, name))
    if visible is not None:
        try:
            groups = [collection.by("project_id", p) for p in visible]
        except TypeError:
            groups = None
        if groups is not None:
            candidates.append((sum(map(len, groups)), groups, None))
    if not candidates:
        return collection.records(), filters
    size, groups, used = min(candidates, key=lambda c: c[0])
    if used is not None:
        filters = {k: v for k, v in filters.items() if k != used}
    return _union(groups), filters


class ListCache:
    """Lists answered again while their kind has not changed (a console, a script or a
    load balancer's health check polling one list): key -> (the kind's version, the
    pagination headers, the items as rendered). One per process, bounded in items (the
    rendered dicts are most of its memory), oldest out first; an entry whose kind moved on
    is replaced on its next miss. Reads take no lock (one dict lookup)."""

    def __init__(self, max_items=4000, max_entry=500):
        self.max_items, self.max_entry = max_items, max_entry
        self._entries = {}
        self._items = 0
        self._lock = threading.Lock()

    def get(self, key, version):
        hit = self._entries.get(key)
        if hit is None or hit[0] != version:
            return None
        return hit[1], hit[2]

    def put(self, key, version, headers, items):
        if len(items) > self.max_entry:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._items -= len(old[2])
            while self._entries and self._items + len(items) > self.max_items:
                self._items -= len(self._entries.pop(next(iter(self._entries)))[2])
            self._entries[key] = (version, tuple(headers), items)
            self._items += len(items)

    def clear(self):
        with self._lock:
            self._entries.clear()
            self._items = 0


LISTED = ListCache()


def sort_and_page(resource, records, query, set_header):
    """Sort `records` (already in default order) and cut one page."""
    sort_key = query.get("sort_key")
    sort_dir = query.get("sort_dir", "asc")
    if sort_dir not in ("asc", "desc"):
        raise BadRequest("sort_dir must be asc or desc")
    if sort_key:
        field = resource.field(sort_key)
        if sort_key not in ("created_at", "updated_at", "uuid") and (
                field is None or not field.sortable):
            raise BadRequest(f"cannot sort by {sort_key!r}")

        def key(r):
            return (_sort_value(r.get(sort_key)), r["created_at"], r["uuid"])
    else:
        def key(r):
            return (r["created_at"], r["uuid"])
    reverse = sort_dir == "desc"
    if sort_key or reverse:
        records = sorted(records, key=key, reverse=reverse)

    limit_text = query.get("page_limit")
    marker = query.get("page_marker")
    if limit_text is None:
        if marker:
            raise BadRequest("page_marker needs page_limit")
        return records
    try:
        limit = int(limit_text)
    except ValueError:
        raise BadRequest("page_limit must be an integer") from None
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"page_limit must be between 1 and {MAX_PAGE}")
    if marker:
        if not UUID_RE.match(marker):
            raise BadRequest("page_marker must be the uuid of the last item seen")
        seen = resource.collection().get(marker.lower())
        if seen is None:
            raise BadRequest("page_marker names no existing item")
        after = key(seen)
        # records are sorted by key: start right after the marker's position
        records = [r for r in records if (key(r) < after if reverse else key(r) > after)]
    page = records[:limit]
    set_header("X-Pagination-Limit", str(limit))
    if len(page) == limit:
        set_header("X-Pagination-Marker", page[-1]["uuid"])
    return page


def check_project_filter(resource, call, visible):
    """A project-scoped caller filtering by a project it may not see gets 403."""
    if visible is None or "project_id" not in call.query:
        return
    for value in call.query.getall("project_id"):
        if value.lower() not in visible:
            raise Forbidden(f"filtering by project {value} is not allowed for this token")
