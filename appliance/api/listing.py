"""Filtering, sorting and marker paging of a collection, as the conventions fix them."""

from .errors import BadRequest, Forbidden
from .fields import FilterError, List, UUID_RE

RESERVED = ("fields", "sort_key", "sort_dir", "page_limit", "page_marker")
MAX_PAGE = 1000


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
