"""`/v1/config/configs/`: a file for the node agent to write on every node of its target
(reference-api.md section 4; docs/configs.md).

A config is checked whole at create and at every PUT: the path is absolute and plain, the
target names nodes or sets its project may target (appliance/tenancy/nodes.py), a
template uses only declared variables, and every link parses and names a linkable field.
A link to a record that does not exist yet is accepted (the config waits for it,
IN_PROGRESS); one to a record of another project is refused. No two configs write one
path on one node (paths.py: 409, checked under a lock per project). Status is the status
step's (appliance/agent/status.py): read-only, and every PUT returns it to NEW
(lifecycle.py).
"""

from appliance import targeting
from appliance.api.errors import BadRequest
from appliance.api.fields import UUID, UUID_RE, Enum, Field, Object, String, Tags
from appliance.api.links import ANY, Link
from appliance.api.resource import Resource
from appliance.kinds import VS_VARIABLES
from appliance.targeting import TARGET_SCHEMA

from . import paths, render
from .lifecycle import STATUSES, new_config, rewritten
from .targets import SECRET_VALUE_FIELDS, link_target

CONTENT_LIMIT = 262144
MODE = r"^0[0-7]{3}$"
# absolute, no NUL, no empty, `.` or `..` component (checked again on the node)
PATH = r"^(/(?!\.\.?(/|$))[^/\x00-\x1f\x7f]+)+$"
OWNER = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$|^[0-9]{1,10}$"
_SCALAR = {"type": ["string", "number", "boolean", "null"], "maxLength": CONTENT_LIMIT}

# `kind` is checked first, so that a wrong kind is reported as such (not as a mismatch
# with every branch)
BODY_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"enum": ["text", "template"]}},
    "required": ["kind"],
    "allOf": [
        {"if": {"properties": {"kind": {"const": "text"}}, "required": ["kind"]},
         "then": {"properties": {"kind": {}, "content": {"type": "string",
                                                         "maxLength": CONTENT_LIMIT}},
                  "required": ["content"], "additionalProperties": False}},
        {"if": {"properties": {"kind": {"const": "template"}}, "required": ["kind"]},
         "then": {"properties": {"kind": {},
                                 "template": {"type": "string", "maxLength": CONTENT_LIMIT},
                                 "variables": {"type": "object", "maxProperties": 256,
                                               "additionalProperties": _SCALAR}},
                  "required": ["template"], "additionalProperties": False}},
    ],
}
ON_CHANGE_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"enum": ["no_action", "shell"]}},
    "required": ["kind"],
    "allOf": [
        {"if": {"properties": {"kind": {"const": "no_action"}}, "required": ["kind"]},
         "then": {"properties": {"kind": {}}, "additionalProperties": False}},
        {"if": {"properties": {"kind": {"const": "shell"}}, "required": ["kind"]},
         "then": {"properties": {"kind": {}, "command": {"type": "string", "minLength": 1,
                                                         "maxLength": CONTENT_LIMIT}},
                  "required": ["command"], "additionalProperties": False}},
    ],
}
# fields a link may read beyond a resource's plain visible fields
_COMPUTED = {(VS_VARIABLES, "value")}


class Configs(Resource):
    def __init__(self):
        super().__init__(
            name="Config", path="/v1/config/configs", kind="config_configs",
            service="config", policy="config", project_scoped=True,
            description="a file the node agent writes on every node of the target",
            fields=[
                Field("name", String(255), default="", nullable=False),
                Field("description", String(255), default="", nullable=False),
                Field("project_id", UUID(), required=True, create_only=True),
                Field("tags", Tags(), default=list, nullable=False),
                Field("path", String(255, min_length=1, pattern=PATH), required=True,
                      description="absolute path on the node, under the agent's allowed "
                                  "roots"),
                Field("target", Object(TARGET_SCHEMA), required=True,
                      description=targeting.DESCRIPTION),
                Field("body", Object(BODY_SCHEMA), required=True,
                      description="{kind: text, content} | {kind: template, template, "
                                  "variables}: `{{ name }}` only; a `$` variable is a link"),
                Field("on_change", Object(ON_CHANGE_SCHEMA),
                      default=lambda: {"kind": "no_action"}, nullable=False,
                      description="{kind: no_action} | {kind: shell, command}: run once "
                                  "per changed delivery"),
                Field("mode", String(4, pattern=MODE), default="0644", nullable=False),
                Field("owner", String(128, pattern=OWNER), default="root", nullable=False),
                Field("group", String(128, pattern=OWNER), default="root", nullable=False),
                Field("status", Enum(*STATUSES), read_only=True,
                      description="NEW after a write, then the status step's"),
                Field("status_reason", String(4096), read_only=True),
                Field("node_status", Object(), read_only=True,
                      description="{node uuid: {status, reason, exit_code, output, "
                                  "changed_at}}"),
            ])

    # the path check and the write under one lock per project (paths.py)
    def create_record(self, call, body):
        project_id = body.get("project_id") if isinstance(body, dict) else None
        if project_id is None and call.principal is not None:
            project_id = call.principal.project_id
        with paths.guard(call.store, str(project_id).lower()):
            return super().create_record(call, body)

    def update_record(self, call, uuid, body):
        current = self.collection().get(uuid.lower()) if UUID_RE.match(uuid) else None
        with paths.guard(call.store, (current or {}).get("project_id")):
            return super().update_record(call, uuid, body)

    def prepare_create(self, call, record):
        record.update(new_config())
        self.check(call, _normalized(record))
        paths.check(call.store, record)
        return record

    def prepare_update(self, call, current, changes):
        config = {**current, **_normalized(changes)}
        self.check(call, config)
        if config["path"] != current["path"] or config["target"] != current["target"]:
            paths.check(call.store, config)
        return rewritten(changes)

    def declared_links(self):
        # the records its `$core` links name (a password, a variable...), and its target
        return [Link(self.kind, ANY, values=linked_records, label="body links"),
                *targeting.links(self.kind)]

    # ---- checks beyond the schema ----------------------------------------------------

    def check(self, call, config):
        try:
            render.check(config["body"])
        except render.TemplateError as e:
            raise BadRequest(f"body.{e}") from None
        for name, link in render.variable_links(config["body"]).items():
            self.check_link(call, link, config["project_id"], f"body.variables.{name}")
        self.check_target(call, config["target"], config["project_id"])

    def check_link(self, call, link, project_id, where):
        def bad(why):
            raise BadRequest(f"{where}: link {link.text}: {why}")
        if link.element != "core" or link.is_import or len(link.segments) != 3:
            bad("a config links $core.<service>.<collection>.$<uuid>[:field]")
        kind, uuid = link_target(link)
        if not UUID_RE.match(uuid):
            bad("a config names the record by its uuid ($<uuid>), having no manifest names")
        service, collection = link.segments[:2]
        resource = self.api.resources.get(f"/v1/{service}/{collection}")
        if resource is None or resource.kind != kind or not resource.project_scoped:
            bad(f"/v1/{service}/{collection} is not a collection a config can link to")
        if link.fields:
            first = link.fields[0]
            field = resource.field(first)
            sealed = getattr(resource, "sealed", ())
            readable = field is not None and not field.write_only and not field.hidden \
                and (first not in sealed or SECRET_VALUE_FIELDS.get(kind) == first)
            if not (readable or (kind, first) in _COMPUTED):
                bad(f"{first} is not a field a config can read from {resource.name}")
        record = call.store.collection(kind).get(uuid)
        if record is not None and record.get("project_id") != project_id:
            bad("names a record of another project")

    def check_target(self, call, target, project_id):
        targeting.checked(call.store, call.principal, project_id, target)


def linked_records(config):
    """(kind, uuid) of each record a config's body links to."""
    found = []
    for link in render.variable_links(config["body"]).values():
        if link.element == "core" and not link.is_import and len(link.segments) == 3:
            found.append(link_target(link))
    return found


def _normalized(values):
    """Stored forms: uuids in lower case (the producer compares them as strings), a
    template's variables present."""
    targeting.normalized(values.get("target"))
    body = values.get("body")
    if body and body["kind"] == "template":
        body.setdefault("variables", {})
    return values


def all_resources():
    return [Configs()]
