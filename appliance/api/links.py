"""What is in use cannot be deleted: one rule, written once (docs/api.md "In use").

Every link the API checks when a record is written is declared here once, as a `Link`
from the kind that holds it (the user) to the kind it names (the used): a `Reference`
field declares itself; a kind-object that carries uuids (a vhost's `cert`, a route's
pools, a config's `$core` links, a target's nodes) declares an extractor; an element
owns the records of its `resources` map. `users_of` answers, for one record, who links to
it, and the framework's delete (`Resource.delete_record`) refuses with 409 while anyone
does, naming the users the caller may see and counting the others.

A link may be a `part`: the user is a part of the used one and goes with it (a domain's
records, an LB's vhosts, a user's role bindings). Parts never refuse a delete; the owner's
`after_delete` removes them.

Cost: a plain field is looked up through the store's index (`Collection.by`); an
extractor's reverse index is built once per change of the user kind and kept. A delete
reads only the links that can name the deleted kind.
"""

import threading

from appliance.kinds import IAM_PROJECTS, IAM_ROLE_BINDINGS

from .errors import Conflict

ANY = "*"                   # a link whose extractor names the kind of each target
PROJECTS = IAM_PROJECTS
SHOWN = 10                  # users named in a refusal; the rest are counted


class Link:
    """`user_kind` records link to `used_kind` records.

    field    a scalar field holding the used uuid (indexed lookups)
    values   record -> iterable of used uuids, or of (kind, uuid) when used_kind is ANY
    held_by  the field of the *used* record that names its user (an attached volume names
             the node that holds it)
    part     the user goes with the used record: never refuses its delete
    message  (used record, users) -> the refusal's text, where a test or a client
             depends on a kind's own wording
    when     record -> bool: the user links only while this holds
    """

    def __init__(self, user_kind, used_kind, *, field=None, values=None, held_by=None,
                 part=False, message=None, when=None, label=None):
        self.user_kind, self.used_kind = user_kind, used_kind
        self.field, self.values, self.held_by = field, values, held_by
        self.part, self.message, self.when = part, message, when
        self.label = label or field or held_by or "link"
        self._index = (None, {})
        self._index_lock = threading.Lock()

    def __repr__(self):
        return f"Link({self.user_kind}.{self.label} -> {self.used_kind}{' part' if self.part else ''})"

    def users(self, store, used_kind, used):
        """The user records linking to `used` (a record of `used_kind`)."""
        if self.held_by is not None:
            uuid = used.get(self.held_by)
            record = store.collection(self.user_kind).get(uuid) if uuid else None
            return [record] if record is not None else []
        collection = store.collection(self.user_kind)
        if self.field is not None:
            found = collection.by(self.field, used["uuid"])
        else:
            found = self._reverse(collection).get((used_kind, used["uuid"]), ())
        if self.when is not None:
            found = [r for r in found if self.when(r)]
        return [r for r in found if r["uuid"] != used["uuid"] or self.user_kind != used_kind]

    def _reverse(self, collection):
        """{(kind, uuid): [user records]}, rebuilt only when the user kind changed."""
        snapshot = collection.snapshot()
        key, index = self._index
        if key == snapshot.key:
            return index
        with self._index_lock:
            key, index = self._index
            if key == snapshot.key:
                return index
            index = {}
            for record in snapshot.ordered():
                try:
                    targets = list(self.values(record) or ())
                except (KeyError, TypeError, AttributeError, ValueError):
                    continue        # a record of an older shape names nothing
                for target in dict.fromkeys(
                        t if self.used_kind == ANY else (self.used_kind, t) for t in targets):
                    index.setdefault(target, []).append(record)
            self._index = (snapshot.key, index)
            return index


class Registry:
    """Every link of one API, built from its resources on first use."""

    def __init__(self, api):
        self.api = api
        self.links = []
        self.resource_of = {}       # kind -> the resource that shows its records
        seen = set()
        for resource in api.resources.values():
            if getattr(resource, "virtual", False):
                continue
            self.resource_of.setdefault(resource.kind, resource)
            for link in self._declared(resource):
                mark = (link.user_kind, link.label, link.used_kind, link.held_by)
                if mark not in seen:
                    seen.add(mark)
                    self.links.append(link)
        self.by_used = {}
        for link in self.links:
            self.by_used.setdefault(link.used_kind, []).append(link)

    def _declared(self, resource):
        from .fields import Reference
        # first: a declared link (one with a message of its own) wins over the plain
        # one its Reference field would give
        yield from resource.declared_links()
        parent_field = resource.parent[0] if resource.parent else None
        for field in resource.fields:
            if isinstance(field.type, Reference):
                used = self.api.resources.get(field.type.collection_path)
                if used is None or getattr(used, "virtual", False):
                    continue
                yield Link(resource.kind, used.kind, field=field.name,
                           part=field.name == parent_field or field.name in resource.part_of)
        if resource.project_scoped and resource.field("project_id") is not None:
            yield Link(resource.kind, PROJECTS, field="project_id")

    def refusing(self, used_kind):
        return [link for link in self.by_used.get(used_kind, []) + self.by_used.get(ANY, [])
                if not link.part]

    def users_of(self, store, kind, record):
        """[(link, user record)] of everyone that links to `record`, parts left out."""
        found = []
        for link in self.refusing(kind):
            for user in link.users(store, kind, record):
                found.append((link, user))
        return found

    # ---- the refusal -------------------------------------------------------------------

    def describe(self, kind, record):
        resource = self.resource_of.get(kind)
        label = resource.name if resource is not None else kind
        name = record.get("name") or record.get("username")
        if name is None and kind == IAM_ROLE_BINDINGS:
            name = "of user " + str(record.get("user"))
        return f"{label} {name!r} ({record['uuid']})" if name else f"{label} {record['uuid']}"

    def visible(self, call, kind, record):
        resource = self.resource_of.get(kind)
        principal = getattr(call, "principal", None)
        if principal is None:
            return True
        if resource is None or not principal.allows(resource.permission("read")):
            return False
        projects = resource.visible_projects(call)
        return projects is None or record.get("project_id") in projects

    def check(self, call, kind, record, ignore=None):
        """409 when anything links to `record`; `ignore(link, user)` skips a user (the
        Element Manager removing what its element owns)."""
        users = [(link, user) for link, user in self.users_of(call.store, kind, record)
                 if ignore is None or not ignore(link, user)]
        if not users:
            return
        seen, shown, hidden = set(), [], 0
        for link, user in users:
            if (link.user_kind, user["uuid"]) in seen:
                continue
            seen.add((link.user_kind, user["uuid"]))
            if self.visible(call, link.user_kind, user):
                shown.append((link, user))
            else:
                hidden += 1
        special = next((link for link, _ in shown if link.message), None)
        if special is not None and not hidden:
            raise Conflict(special.message(record, [u for l, u in shown if l is special]))
        raise Conflict(refusal(self.describe(kind, record),
                               [self.describe(link.user_kind, user) for link, user in shown],
                               hidden))


def refusal(what, named, hidden):
    parts = named[:SHOWN]
    if len(named) > SHOWN:
        parts.append(f"{len(named) - SHOWN} more")
    if hidden:
        parts.append(f"{hidden} record{'s' if hidden > 1 else ''} you cannot see")
    return (f"{what} is in use: it is used by {', '.join(parts)}; delete or change "
            f"{'them' if len(named) + hidden > 1 else 'it'} first")


def registry(api):
    found = getattr(api, "_links", None)
    if found is None:
        found = api._links = Registry(api)
    return found


def users_of(api, kind, record):
    """[(link, user record)] linking to `record` of `kind` (parts left out)."""
    return registry(api).users_of(api.store, kind, record)
