"""The marketplace as the reference serves it (spec 1: public and private element
catalogs), over the same RepoElement records as `/v1/repo/elements`:

- `GET /v1/repo/store/`: where the two catalogs are (paths), for anyone;
- `GET /v1/repo/store/elements[/<uuid>]`: the public catalog, every element version of
  the admin project's repositories, for anyone: no token needed (the reference's CLI asks
  without one), and a token sent is not even read;
- `GET /v1/repo/store/latest_stable_elements`: the newest release (not development)
  version of each name the caller may see, `repo.element.read`, paged like any list.

Neither shows `installation_state` nor `element`: what this realm has installed is not
part of a catalog (and not for anonymous eyes); `/v1/repo/elements` shows it.
"""

from appliance import versions
from appliance.api.resource import Resource
from appliance.api.routing import PUBLIC
from appliance.kinds import ADMIN_PROJECT
from state import order_key

STORE = "/v1/repo/store"
PRIVATE_FIELDS = ("installation_state", "element")


class Catalog(Resource):
    """A read-only view of RepoElements under /v1/repo/store."""

    def __init__(self, elements, part, description, operations):
        super().__init__(
            name="StoreElement", path=f"{STORE}/{part}", kind=elements.kind,
            service="repo", policy="element", project_scoped=True, operations=operations,
            description=description,
            fields=[f for f in elements.fields if f.name not in PRIVATE_FIELDS])


class PublicCatalog(Catalog):
    def __init__(self, elements):
        super().__init__(elements, "elements", "the public catalog: the admin project's "
                         "element versions; no token needed", ("list", "get"))

    def permission(self, action):
        return PUBLIC

    def visible_projects(self, call):
        # the same for every caller: a public route does not read the token
        return {ADMIN_PROJECT}


class LatestStable(Catalog):
    def __init__(self, elements):
        super().__init__(elements, "latest_stable_elements",
                         "the newest release version of each name in the admin project's "
                         "and the caller's project's repositories", ("list",))

    def visible_projects(self, call):
        """The shared catalog and the caller's own project; an unscoped token has no
        project of its own, so it gets the shared catalog (as in the reference)."""
        own = call.principal.project_id if call.principal is not None else None
        return {ADMIN_PROJECT} | ({own} if own else set())

    def filter_query(self, call, records):
        """One record per name: the highest release version; the same version in two
        repositories goes to the higher repository priority (as the resolver prefers)."""
        repositories = call.store.collection("repo_repositories")
        newest = {}
        for record in records:
            try:
                version = versions.parse(record.get("version"))
            except versions.VersionError:
                continue
            if not version.is_release:
                continue
            priority = (repositories.get(record.get("repository")) or {}).get("priority") or 0
            held = newest.get(record.get("name"))
            if held is None or (version, priority) > held[0]:
                newest[record.get("name")] = ((version, priority), record)
        # back in the default order, which paging by marker relies on
        return sorted((record for _, record in newest.values()), key=order_key)


def all_resources(elements):
    return [PublicCatalog(elements), LatestStable(elements)]


def register_index(api):
    def index(call):
        return {"elements": f"{STORE}/elements",
                "latest_stable_elements": f"{STORE}/latest_stable_elements"}

    api.route("GET", STORE, index, permission=PUBLIC, tag="repo",
              summary="Where the element catalogs are (paths)",
              response_schema={"type": "object", "required": ["elements",
                                                              "latest_stable_elements"],
                               "properties": {"elements": {"type": "string"},
                                              "latest_stable_elements": {"type": "string"}}})
