"""A resource declared once: fields, keys, policy. From the declaration come the CRUD
routes, body validation, filters, rendering and the OpenAPI schemas (the writable fields,
the create fields and the full read object kept apart, as Incus does).

Capabilities subclass `Resource` and override the hooks (`prepare_create`,
`prepare_update`, `check_delete`, `after_delete`) for their own rules. A rule that holds
every kind's writes (a project's quotas) is installed on the Api as a write check
(`Api.write_checks`), so the framework names no rule above it.
"""

import contextlib
import uuid as uuidlib

from state.collection import Collection

from appliance.kinds import ADMIN_PROJECT, IAM_PROJECTS

from . import audit, links
from .conflicts import retry_conflicts
from .errors import BadRequest, Forbidden, NotFound
from .fields import UUID_PATTERN, UUID_RE, DateTime, Field, FieldType, UUID
from .listing import (LISTED, check_project_filter, matches, parse_filters, sort_and_page,
                      source)
from .routing import Reply
from .validation import Validator

PROJECTS = IAM_PROJECTS         # the kind a project-scoped record's project_id must name
# listing.check_project_filter's refusal: a list of a project-scoped kind answers it even
# on a public route (the store's catalog), so every such list declares it
PROJECT_FILTER_403 = {"403": {
    "description": "Forbidden: the token lacks the permission, or the project_id filter "
                   "names a project the caller may not see",
    "$ref": "#/components/schemas/Error"}}
OPERATIONS = ("list", "create", "get", "update", "delete")
BOOKKEEPING_FIELDS = [
    Field("uuid", UUID(), read_only=True, description="identifier; may be given on create"),
    Field("created_at", DateTime(), read_only=True),
    Field("updated_at", DateTime(), read_only=True),
]


class Action:
    """`POST <item>/actions/<name>/invoke` (changes state) or `GET <item>/actions/<name>`."""

    def __init__(self, name, handler, *, permission=None, method="POST", summary="",
                 request_schema=None, response_schema=None, max_body=None, accepts=None,
                 status=200, parameters=()):
        self.name, self.handler, self.permission = name, handler, permission
        # OpenAPI parameter objects of the query it reads (a GET action's options)
        self.parameters = parameters
        self.method, self.summary = method, summary
        self.request_schema, self.response_schema = request_schema, response_schema
        self.max_body, self.accepts, self.status = max_body, accepts, status


class Resource:
    # service policy of the permission names: <service>.<policy>.<action>
    def __init__(self, *, name, path, kind, service, policy, fields, unique=(),
                 project_scoped=False, shared_projects=(), description="", actions=(),
                 max_body=None, create_accepts=None, operations=OPERATIONS, parent=None):
        self.operations = operations
        # a sub-collection: (field, parent collection path); `path` then holds
        # `<field>` (e.g. /v1/dns/domains/<domain>/records) and items belong to one parent
        self.parent = parent
        self.name = name
        self.path = path.rstrip("/")
        self.kind = kind
        self.service = service
        self.policy = policy
        self.fields = list(fields)
        self.unique = [tuple(u) for u in unique]
        self.project_scoped = project_scoped
        # projects whose records every scoped caller may read (the admin project's
        # shared repositories, for instance)
        self.shared_projects = tuple(shared_projects)
        self.description = description
        self.actions = list(actions)
        self.max_body = max_body
        self.create_accepts = create_accepts
        self.api = None
        self._by_name = {f.name: f for f in BOOKKEEPING_FIELDS + self.fields}
        self._field_validators = {}
        self._render_plan = None
        self.create_validator = Validator(self.create_schema())
        self.update_validator = Validator(self.update_schema())

    # ---- declaration queries -----------------------------------------------------

    def field(self, name):
        return self._by_name.get(name)

    def field_validator(self, name):
        """A validator of one field's input value, built once (compiling a schema costs
        far more than checking a value)."""
        validator = self._field_validators.get(name)
        if validator is None:
            validator = Validator({"type": "object", "properties": {
                name: self.field(name).input_schema()}})
            self._field_validators[name] = validator
        return validator

    def filterable_fields(self):
        return [f for f in BOOKKEEPING_FIELDS + self.fields if f.filterable]

    def visible_fields(self):
        return [f for f in BOOKKEEPING_FIELDS[:1] + self.fields + BOOKKEEPING_FIELDS[1:]
                if not f.write_only and not f.hidden]

    def permission(self, action):
        return f"{self.service}.{self.policy}.{action}"

    def collection(self):
        return self.api.store.collection(self.kind, unique=self.unique)

    # ---- schemas -------------------------------------------------------------------

    def create_schema(self):
        writable = [f for f in self.fields if not f.read_only and not f.hidden]
        props = {"uuid": {"type": "string", "format": "uuid", "pattern": UUID_PATTERN}}
        props.update({f.name: f.input_schema() for f in writable})
        return {"type": "object", "properties": props, "additionalProperties": False,
                "required": [f.name for f in writable if f.required]}

    def update_schema(self):
        writable = [f for f in self.fields
                    if not f.read_only and not f.hidden and not f.create_only]
        return {"type": "object", "properties": {f.name: f.input_schema() for f in writable},
                "additionalProperties": False}

    def read_schema(self):
        fields = self.visible_fields()
        return {"type": "object",
                "properties": {f.name: f.output_schema() for f in fields},
                "required": [f.name for f in fields if not f.omit_unset]}

    # ---- registration --------------------------------------------------------------

    def register(self, api):
        self.api = api
        api.store.collection(self.kind, unique=self.unique)
        item = self.path + "/<uuid>"
        common = {"tag": self.service, "resource": self}
        ref = self.name
        api.resources[self.path] = self
        ops = self.operations
        if "list" in ops:
            api.route("GET", self.path, self._admitted(self.list_handler),
                      permission=self.permission("read"),
                      summary=f"List {ref}s", response_schema={"type": "array", "items": {
                          "$ref": f"#/components/schemas/{ref}"}},
                      query_params=self.query_parameters(),
                      error_schemas=PROJECT_FILTER_403 if self.project_scoped else None,
                      **common)
        if "create" in ops:
            api.route("POST", self.path, self._admitted(self.create_handler),
                      permission=self.permission("create"), summary=f"Create a {ref}",
                      status=201, max_body=self.max_body,
                      accepts=self.create_accepts or ("application/json",),
                      request_schema={"$ref": f"#/components/schemas/{ref}Create"},
                      response_schema={"$ref": f"#/components/schemas/{ref}"}, **common)
        if "get" in ops:
            api.route("GET", item, self._admitted(self.get_handler),
                      permission=self.permission("read"),
                      summary=f"Get a {ref}", answer_kinds=self.answer_kinds(),
                      response_schema={"$ref": f"#/components/schemas/{ref}"}, **common)
        if "update" in ops:
            api.route("PUT", item, self._admitted(self.update_handler),
                      permission=self.permission("update"),
                      summary=f"Update a {ref} (only the fields sent)",
                      max_body=self.max_body,
                      request_schema={"$ref": f"#/components/schemas/{ref}Update"},
                      response_schema={"$ref": f"#/components/schemas/{ref}"}, **common)
        if "delete" in ops:
            api.route("DELETE", item, self._admitted(self.delete_handler),
                      permission=self.permission("delete"), summary=f"Delete a {ref}",
                      status=204, **common)
        for action in self.actions:
            suffix = "/invoke" if action.method == "POST" else ""
            api.route(action.method, f"{item}/actions/{action.name}{suffix}",
                      self._admitted(self._action_endpoint(action)),
                      permission=action.permission or self.permission(action.name),
                      summary=action.summary or f"{action.name} a {ref}",
                      request_schema=action.request_schema,
                      response_schema=action.response_schema, max_body=action.max_body,
                      accepts=action.accepts or ("application/json",),
                      status=action.status, parameters=action.parameters, **common)

    # what an item GET runs: where all of them are Resource's own, its answer is the
    # record's (its kind) and the caller's principal's alone
    _ITEM_GET = ("get_handler", "load_visible", "visible_projects", "admit", "render",
                 "projection", "collection", "_admitted")

    def answer_kinds(self):
        """The kinds an item GET's answer is worked out from, for the event loop to answer
        it again while they do not change (appliance/api/answers.py); None where a
        subclass changes what goes into it, or a parent's record does."""
        if self.parent or any(getattr(type(self), name) is not getattr(Resource, name)
                              for name in self._ITEM_GET):
            return None
        return (self.kind,)

    def query_parameters(self):
        return [f for f in self.filterable_fields()]

    # ---- project scoping -----------------------------------------------------------

    def admit(self, call):
        """Runs first on every route of the resource, after its permission check: a
        rule that no permission can say (hypervisors: platform callers only). Raises."""

    def _admitted(self, handler):
        def admitted(call):
            self.admit(call)
            return handler(call)
        return admitted

    def visible_projects(self, call):
        """None when the caller sees every project, else the set it may read."""
        principal = call.principal
        if not self.project_scoped or principal is None or principal.project_id is None:
            return None
        return {principal.project_id, *self.shared_projects}

    def writable_project(self, call, project_id):
        principal = call.principal
        if not self.project_scoped or principal is None or principal.project_id is None:
            return
        if project_id != principal.project_id:
            raise Forbidden(f"this token may only write in project {principal.project_id}")

    def load_visible(self, call, uuid):
        """The record, or 404 when it does not exist or the caller may not see it."""
        record = self.collection().get(uuid.lower()) if UUID_RE.match(uuid) else None
        visible = self.visible_projects(call)
        if record is None or (visible is not None and record.get("project_id") not in visible):
            raise NotFound(f"{self.name} {uuid} not found")
        if self.parent and call.params.get(self.parent[0]) not in (None, record.get(
                self.parent[0])):
            raise NotFound(f"{self.name} {uuid} not found")
        if call.request is not None:
            # the project of a delete or an action's record, for its audit entry
            audit.note(call.request.environ, project_id=record.get("project_id"))
        return record

    def parent_record(self, call, parent_uuid):
        """The parent of a sub-collection item, visible to the caller, else 404."""
        field, parent_path = self.parent
        parent = self.api.resources[parent_path]
        return parent.load_visible(call, str(parent_uuid or ""))

    def item_path(self, record):
        path = self.path
        if self.parent:
            path = path.replace(f"<{self.parent[0]}>", record[self.parent[0]])
        return f"{path}/{record['uuid']}"

    # ---- rendering -----------------------------------------------------------------

    def render(self, record, only=None):
        out = {}
        get = record.get
        for name, shown, omit_unset in self._render_plan or self._plan_render():
            if only is not None and name not in only:
                continue
            value = get(name)
            if value is None and omit_unset:
                continue
            out[name] = value if shown is None else shown(value)
        return out

    def _plan_render(self):
        """What render does per visible field, worked out once instead of per record:
        (name, the type's render or None where it is the identity, omit_unset)."""
        self._render_plan = tuple(
            (f.name, None if type(f.type).render is FieldType.render else f.type.render,
             f.omit_unset) for f in self.visible_fields())
        return self._render_plan

    def projection(self, call):
        wanted = call.query.getall("fields")
        if not wanted:
            return None
        names = {f.name for f in self.visible_fields()}
        unknown = sorted(set(wanted) - names)
        if unknown:
            raise BadRequest(f"unknown field(s) in fields: {', '.join(unknown)}")
        return set(wanted)

    # ---- input ---------------------------------------------------------------------

    def _body_object(self, call):
        body = call.body
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        return dict(body)

    def _normalize(self, body, current=None):
        """Unknown fields -> 400; read-only fields -> 403 (on update a read-only field
        sent back unchanged is ignored, so a client may PUT what it read)."""
        unknown = sorted(k for k in body if self.field(k) is None or self.field(k).hidden)
        if unknown:
            raise BadRequest(f"unknown field(s) for {self.name}: {', '.join(unknown)}")
        clean = {}
        for name, value in body.items():
            field = self.field(name)
            if value is None and not field.nullable and not field.required:
                # null on a field that has no use for it: not given (docs/validation.md)
                continue
            value = field.type.to_input(value)
            locked = field.read_only or (current is not None and field.create_only)
            if current is None and name == "uuid":
                locked = False
            if locked:
                if current is not None and (name not in current or value == current.get(name)
                                            or value == field.type.render(current.get(name))):
                    continue
                raise Forbidden(f"{name} is read-only")
            clean[name] = value
        return clean

    # ---- hooks for subclasses ------------------------------------------------------

    # query parameters a resource takes beyond field filters: {name: description}
    extra_query = {}

    def filter_query(self, call, records):
        """Apply `extra_query` parameters; the default takes none."""
        return records

    def link_value(self, shown, name):
        """What a manifest link `...:name` gives for a record as shown to clients."""
        return shown.get(name)

    def prepare_create(self, call, record):
        """Last checks and derived fields before insert; raise an ApiError to refuse."""
        return record

    def prepare_update(self, call, current, changes):
        return changes

    def after_create(self, call, record):
        pass

    def after_update(self, call, before, after):
        pass

    # Reference fields naming records this one is a part of: it goes with them, so they
    # never refuse a delete for it (a sub-collection's parent field is one already)
    part_of = ()
    # a view over another kind's records (the Element Manager's parts): declares no links
    virtual = False

    def declared_links(self):
        """Links of this kind's records beyond its Reference fields and project_id
        (appliance/api/links.py): kind-objects that carry uuids."""
        return ()

    def check_delete(self, call, record):
        """Raise Conflict for a kind's own rule (the built-in admin, an active profile);
        what links to the record is the framework's check (appliance/api/links.py)."""

    def check_in_use(self, call, record):
        """409 while another record links to this one, or an element owns it."""
        links.registry(self.api).check(call, self.kind, record,
                                       ignore=getattr(call, "ignore_in_use", None))

    def after_delete(self, call, record):
        pass

    # ---- handlers ------------------------------------------------------------------

    def list_handler(self, call):
        parent_uuid = None
        if self.parent:
            parent_uuid = self.parent_record(call, call.params[self.parent[0]])["uuid"]
        visible = self.visible_projects(call)
        check_project_filter(self, call, visible)
        filters = parse_filters(self, call.query)
        only = self.projection(call)
        collection = self.collection()
        set_header = _header_setter()
        cache_key = version = None
        if self._lists_cacheable(collection):
            # read before the records: a change landing in between is a miss next time
            version = collection.version()
            cache_key = (self, tuple(call.query.allitems()),
                         None if visible is None else frozenset(visible), parent_uuid)
            hit = LISTED.get(cache_key, version)
            if hit is not None:
                for name, value in hit[0]:
                    set_header(name, value)
                return [dict(item) for item in hit[1]]
        records, filters = source(self, collection, filters, visible,
                                  (self.parent[0], parent_uuid) if self.parent else None)
        if visible is not None or filters:
            records = [r for r in records
                       if (visible is None or r.get("project_id") in visible)
                       and matches(r, filters)]
        records = self.filter_query(call, records)
        headers = []
        page = sort_and_page(self, records, call.query,
                             lambda name, value: headers.append((name, value)))
        for name, value in headers:
            set_header(name, value)
        items = [self.render(r, only) for r in page]
        if cache_key is None:
            return items
        LISTED.put(cache_key, version, headers, items)
        # the cached items stay as rendered, whatever a caller does with its own
        return [dict(item) for item in items]

    def _lists_cacheable(self, collection):
        """Whether a list shows nothing but its kind's records: the base render and
        filter_query (a subclass's may read other kinds: an LB's addresses, a
        variable's value) over a stored kind (not a view computed per request from
        others), so the kind's version says when the answer changes."""
        cls = type(self)
        return (cls.render is Resource.render and cls.filter_query is Resource.filter_query
                and isinstance(collection, Collection))

    def create_handler(self, call):
        created = self.create_record(call, self._body_object(call))
        return Reply(self.render(created), 201, {"Location": self.item_path(created)})

    def create_record(self, call, body):
        """Validate and insert; the stored record. Also used in-process (Element Manager)."""
        parent = None
        if self.parent:
            # the parent first: under a parent the caller may not see, nothing else is told
            field = self.parent[0]
            from_path = call.params.get(field)
            given = self.field(field).type.to_input(body.get(field))
            parent = self.parent_record(call, from_path or given)
            if from_path is not None and given not in (None, parent["uuid"]):
                raise BadRequest(f"{field}: must be the one of the path")
        body = self._normalize(body)
        principal = call.principal
        if parent is not None:
            body[self.parent[0]] = parent["uuid"]
            if self.project_scoped and body.get("project_id") is None:
                body["project_id"] = parent.get("project_id")
        if (self.project_scoped and body.get("project_id") is None and principal is not None
                and principal.project_id is not None):
            body["project_id"] = principal.project_id
        if self.project_scoped:
            # before validation: a caller writing into a foreign project learns nothing more
            self.writable_project(call, body.get("project_id"))
        for f in self.fields:
            if f.name not in body and f.default is not None:
                body[f.name] = f.default_value()
        self.create_validator.check(body)
        if self.project_scoped and call.store.collection(PROJECTS).get(
                body.get("project_id")) is None:
            raise BadRequest(f"project_id: project {body.get('project_id')} does not exist")
        if "uuid" in body:
            body["uuid"] = body["uuid"].lower()
        else:
            body["uuid"] = str(uuidlib.uuid4())
        record = {f.name: None for f in self.fields if not f.omit_unset}
        record.update(body)
        record = self.prepare_create(call, record)
        # the write checks (a project's quotas): checked and written under their locks
        with self._write_guard(record.get("project_id")):
            self._check_write(None, record)
            created = self.collection().insert(record)
        self.after_create(call, created)
        return created

    def get_handler(self, call):
        return self.render(self.load_visible(call, call.params["uuid"]), self.projection(call))

    def update_handler(self, call):
        return self.render(self.update_record(call, call.params["uuid"],
                                              self._body_object(call)))

    def update_record(self, call, uuid, body):
        """Validate and apply a partial update; the stored record. The write is a
        compare-and-set against the revision the hooks saw: when another writer (a daemon
        writing status) got in between, the change is worked out again on the fresh
        record, since a PUT sets only the fields it names."""
        def attempt():
            current = self.load_visible(call, uuid)
            if self.project_scoped:
                self.writable_project(call, current.get("project_id"))
            changes = self._normalize(body, current)
            self.update_validator.check(changes)
            changes = self.prepare_update(call, current, changes)
            self._check_write(current, {**current, **changes})
            return current, self.collection().update(current["uuid"], changes,
                                                     expect_revision=current["revision"])

        # prepare_update hooks only read, so the last attempt may hold the kind's lock;
        # a write check's lock is a named one, taken before it (project_id never changes)
        project_id = self.load_visible(call, uuid).get("project_id")
        with self._write_guard(project_id):
            current, updated = retry_conflicts(attempt, last_under=self.collection().lock)
        self.after_update(call, current, updated)
        return updated

    @contextlib.contextmanager
    def _write_guard(self, project_id):
        """Held across a write and its checks: the lock of each write check, in the order
        they were installed (named store locks, so taken before the kind's lock)."""
        with contextlib.ExitStack() as stack:
            for write_check in self.api.write_checks:
                stack.enter_context(write_check.guard(self.api.store, self.kind, project_id))
            yield

    def _check_write(self, before, after):
        """Each write check on writing `after` (a new record when `before` is None, else
        what `before` becomes); one raises the ApiError that refuses it."""
        for write_check in self.api.write_checks:
            write_check.check(self.api.store, self.api.settings, self.kind, before, after)

    def delete_handler(self, call):
        self.delete_record(call, call.params["uuid"])
        return Reply(None, 204)

    def delete_record(self, call, uuid):
        current = self.load_visible(call, uuid)
        if self.project_scoped:
            self.writable_project(call, current.get("project_id"))
        self.check_delete(call, current)
        self.check_in_use(call, current)
        self.collection().delete(current["uuid"])
        self.after_delete(call, current)
        return current

    def _action_endpoint(self, action):
        def endpoint(call):
            record = self.load_visible(call, call.params["uuid"])
            if action.method == "POST" and self.project_scoped:
                self.writable_project(call, record.get("project_id"))
            return action.handler(call, record)
        return endpoint


def _header_setter():
    import bottle
    return bottle.response.set_header
