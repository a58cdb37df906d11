"""Values Store resources: profiles, variables, values.

A profile names a deployment scale; exactly one is active. A variable's `setter` says
where its value comes from: a table of values per profile (`kind: profile`) or the value
records bound to it (`kind: selector`). The variable's `value` is never stored: it is
worked out on every read (values.variable_value), so it follows the active profile and
the newest bound value without any write to the variable.
"""

from appliance.api.errors import BadRequest, Conflict, NotFound
from appliance.api.fields import UUID, Boolean, Enum, Field, Object, Reference, String, Tags, Text
from appliance.api.links import Link
from appliance.api.resource import Action, Resource
from appliance.kinds import ADMIN_PROJECT

from .values import PROFILES, VALUES, VARIABLES, NoValue, variable_value

PROFILES_PATH = "/v1/vs/profiles"
VARIABLES_PATH = "/v1/vs/variables"
VALUES_PATH = "/v1/vs/values"
NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.@:/ -]{0,254}$"

PROFILE_REF = Reference(PROFILES_PATH)
VALUE_REF = Reference(VALUES_PATH)
PROFILE_SETTER = {
    "type": "object",
    "properties": {
        "kind": {"const": "profile"},
        "fallback_strategy": {"enum": ["ignore", "fail"]},
        "profiles": {"type": "array", "maxItems": 256, "items": {
            "type": "object",
            "properties": {"profile": PROFILE_REF.schema(), "value": {}},
            "required": ["profile", "value"], "additionalProperties": False}},
    },
    "required": ["kind", "profiles"], "additionalProperties": False,
}
SELECTOR_SETTER = {
    "type": "object",
    "properties": {"kind": {"const": "selector"},
                   "selector_strategy": {"enum": ["latest"]}},
    "required": ["kind"], "additionalProperties": False,
}
# `kind` is checked first so that a wrong kind is reported as such, not as a mismatch
# against both shapes; if/then then picks the one shape that applies
SETTER = {
    "type": "object",
    "properties": {"kind": {"enum": ["profile", "selector"]}},
    "required": ["kind"],
    "allOf": [
        {"if": {"properties": {"kind": {"const": "profile"}}, "required": ["kind"]},
         "then": PROFILE_SETTER},
        {"if": {"properties": {"kind": {"const": "selector"}}, "required": ["kind"]},
         "then": SELECTOR_SETTER},
    ],
}
SETTER_DEFAULTS = {"profile": {"fallback_strategy": "ignore"},
                   "selector": {"selector_strategy": "latest"}}


class Setter(Object):
    """The setter, normalized on input: defaults filled in, profiles as bare lowercase
    uuids. Normalizing in the type (not in a hook) means a manifest that leaves the
    defaults out compares equal to what is stored, so reconciling it rewrites nothing."""

    def __init__(self):
        super().__init__(SETTER)

    def to_input(self, value):
        kind = value.get("kind") if isinstance(value, dict) else None
        if not isinstance(kind, str) or kind not in SETTER_DEFAULTS:
            return value        # left as sent (an object, a list...) for the schema to reject
        value = {**SETTER_DEFAULTS[kind], **value}
        if "element" in value and value["element"] is None:
            # the reference's CLI sends `element: null` (per-element profiles, which this
            # realm does not have): null means "none", so it is dropped, not stored
            del value["element"]
        if isinstance(value.get("profiles"), list):
            value["profiles"] = [
                {**e, "profile": PROFILE_REF.to_input(e["profile"])}
                if isinstance(e, dict) and "profile" in e else e
                for e in value["profiles"]]
        return value


class AnyJson(Object):
    """Any JSON value at all: `{}` as JSON Schema accepts everything, null included."""
    type_name = "any"

    def schema(self):
        return {}


def common_fields():
    return [
        Field("name", String(255, pattern=NAME), required=True),
        Field("description", Text(4096)),
        Field("project_id", UUID(), required=True, create_only=True),
    ]


def visible_to(resource, call, record):
    """Whether the caller may read `record` of `resource`: a reference to a record the
    caller cannot see is answered as if it did not exist."""
    visible = resource.visible_projects(call)
    return record is not None and (visible is None or record.get("project_id") in visible)


def reject_body(call):
    if call.body not in (None, {}):
        raise BadRequest("this action takes no parameters: send {} or no body")


class Profiles(Resource):
    def __init__(self):
        super().__init__(
            name="Profile", path=PROFILES_PATH, kind=PROFILES, service="vs",
            policy="profile", project_scoped=True, unique=[("name",)],
            # profiles are global: every project's variables pick their values by them
            shared_projects=(ADMIN_PROJECT,),
            description="a deployment scale; the active one picks every profile "
                        "variable's value",
            fields=common_fields() + [
                Field("profile_type", Enum("GLOBAL"), default="GLOBAL", nullable=False),
                Field("active", Boolean(), read_only=True,
                      description="true for the one active profile; change it with the "
                                  "activate action"),
            ],
            actions=[Action("activate", self.activate,
                            summary="Make this profile the active one")])

    def prepare_create(self, call, record):
        record["active"] = False
        return record

    def activate(self, call, record):
        reject_body(call)
        # the active profile picks the values of every project's variables: switching it
        # is for a caller who may write in the admin project, not for one project's owner
        self.writable_project(call, ADMIN_PROJECT)
        profiles = self.collection()
        # Under the kind's lock the flags read are the flags overwritten: two concurrent
        # activations are serialized, and both flips land in ONE atomic file write, so a
        # crash leaves the old active profile or the new one, never two and never none.
        with profiles.lock:
            target = profiles.get(record["uuid"])
            if target is None:
                raise NotFound(f"{self.name} {record['uuid']} not found")
            if target.get("active"):
                return self.render(target)
            flips = {r["uuid"]: (r["revision"], {"active": False})
                     for r in profiles.by("active", True)}
            flips[target["uuid"]] = (target["revision"], {"active": True})
            written = profiles.update_many(flips)
        return self.render(written[target["uuid"]])

    def delete_record(self, call, uuid):
        # activation takes the same lock: the profile cannot become active between the
        # check below and the delete (the API and the Element Manager both come here)
        with self.collection().lock:
            return super().delete_record(call, uuid)

    def check_delete(self, call, record):
        if record.get("active"):
            raise Conflict(f"profile {record['name']} is the active profile; activate "
                           "another one first")

    def declared_links(self):
        return [Link(VARIABLES, PROFILES, label="setter.profiles", values=lambda v: [
            e["profile"] for e in v["setter"]["profiles"]]
            if (v.get("setter") or {}).get("kind") == "profile" else [],
            message=lambda profile, users: f"profile {profile['name']} is used by "
                                           "variable(s) " + ", ".join(
                                               sorted(u["name"] for u in users)[:10]))]


class Variables(Resource):
    def __init__(self, profiles):
        self.profiles = profiles
        super().__init__(
            name="Variable", path=VARIABLES_PATH, kind=VARIABLES, service="vs",
            policy="variable", project_scoped=True, unique=[("name", "project_id")],
            description="a named value: per profile, or the selected (else the latest) value "
                        "bound to it",
            fields=common_fields() + [
                Field("setter", Setter(), required=True,
                      description="kind profile: {fallback_strategy ignore|fail, profiles: "
                                  "[{profile, value}]}; kind selector: "
                                  "{selector_strategy latest}"),
                Field("value", AnyJson(), read_only=True, filterable=False,
                      description="the current value, worked out when read: the active "
                                  "profile's entry, or the selected (else the latest) "
                                  "bound value"),
            ],
            actions=[
                Action("select_value", self.select_value,
                       summary="Bind a value to this selector variable (if it is free) "
                               "and make it the variable's value",
                       request_schema={"type": "object", "required": ["value"],
                                       "properties": {"value": {"type": "string"}},
                                       "additionalProperties": False}),
                Action("release_value", self.release_value,
                       summary="Drop the selection: the latest bound value applies again"),
            ])

    def render(self, record, only=None):
        out = super().render(record, only)
        if only is None or "value" in only:
            try:
                out["value"] = variable_value(self.api.store, record)
            except NoValue:
                # fallback_strategy fail: a read must still answer; it shows that there
                # is no value (and a manifest link through render sees none either)
                out["value"] = None
        return out

    def prepare_create(self, call, record):
        self.check_profiles(call, record["setter"])
        return record

    def prepare_update(self, call, current, changes):
        if "setter" in changes:
            self.check_profiles(call, changes["setter"])
            if (changes["setter"]["kind"] != "selector"
                    and call.store.collection(VALUES).by("variable", current["uuid"])):
                raise Conflict(f"variable {current['name']} has values bound to it; delete "
                               "them before it stops being a selector")
        return changes

    def check_profiles(self, call, setter):
        """400 when the setter names a profile that does not exist (for this caller), or
        one profile twice."""
        profiles = call.store.collection(PROFILES)
        seen = set()
        for i, entry in enumerate(setter.get("profiles") or ()):
            uuid = entry["profile"]
            if not visible_to(self.profiles, call, profiles.get(uuid)):
                raise BadRequest(f"setter.profiles.{i}.profile: profile {uuid} does not "
                                 "exist")
            if uuid in seen:
                raise BadRequest(f"setter.profiles.{i}.profile: profile {uuid} is listed "
                                 "twice")
            seen.add(uuid)

    # ---- selection ---------------------------------------------------------------

    def _selector(self, record):
        if record["setter"]["kind"] != "selector":
            raise Conflict(f"variable {record['name']} takes its value from a "
                           f"{record['setter']['kind']} setter; only a selector variable "
                           "selects values")

    @staticmethod
    def _unselect(values, variable_uuid):
        """update_many entries that clear the variable's selection (read under the lock)."""
        return {v["uuid"]: (v["revision"], {"manual_selected": False})
                for v in values.by("variable", variable_uuid) if v.get("manual_selected")}

    def select_value(self, call, record):
        body = call.body if call.body is not None else {}
        if not isinstance(body, dict) or set(body) != {"value"}:
            raise BadRequest("body must be {\"value\": <uuid or path of a value>}")
        if not isinstance(body["value"], str):
            raise BadRequest("value: must be the uuid or path of a value")
        self._selector(record)
        resource = self.api.resources[VALUES_PATH]
        values = resource.collection()
        # the flags cleared are the ones read under the lock, and every flip lands in one
        # file write: two concurrent selections leave exactly one value selected
        with values.lock:
            value = values.get(VALUE_REF.to_input(body["value"]))
            if not visible_to(resource, call, value):
                raise BadRequest(f"value: value {body['value']} does not exist")
            if value.get("variable") not in (None, record["uuid"]):
                raise BadRequest(f"value: value {value['uuid']} belongs to another "
                                 "variable")
            if value["project_id"] != record["project_id"]:
                raise BadRequest(f"value: value {value['uuid']} is in project "
                                 f"{value['project_id']}, not in {record['project_id']}")
            flips = self._unselect(values, record["uuid"])
            flips[value["uuid"]] = (value["revision"], {"variable": record["uuid"],
                                                        "manual_selected": True})
            values.update_many(flips)
        return self.render(self.collection().require(record["uuid"]))

    def release_value(self, call, record):
        reject_body(call)
        self._selector(record)
        values = self.api.resources[VALUES_PATH].collection()
        with values.lock:
            flips = self._unselect(values, record["uuid"])
            if not flips:
                raise Conflict(f"variable {record['name']} has no selected value")
            values.update_many(flips)
        return self.render(self.collection().require(record["uuid"]))

    def after_delete(self, call, record):
        # values are the variable's own history: they go with it
        call.store.collection(VALUES).delete_where(
            lambda v: v.get("variable") == record["uuid"])


class Values(Resource):
    # a variable's values are its own history: they go with it (Variables.after_delete)
    part_of = ("variable",)

    def __init__(self, variables):
        self.variables = variables
        super().__init__(
            name="Value", path=VALUES_PATH, kind=VALUES, service="vs", policy="value",
            project_scoped=True,
            description="a value; bound to a selector variable, the selected (else the "
                        "latest) one is the variable's value",
            fields=common_fields() + [
                Field("variable", Reference(VARIABLES_PATH), create_only=True,
                      description="a variable with a selector setter, in the same project; "
                                  "null for a free value (bind it with select_value)"),
                Field("value", AnyJson(), required=True, filterable=False),
                Field("manual_selected", Boolean(), read_only=True,
                      description="true for the value chosen with its variable's "
                                  "select_value action"),
                Field("tags", Tags()),
            ])

    def prepare_create(self, call, record):
        record["manual_selected"] = False
        uuid = record["variable"]
        if uuid is None:
            return record
        variable = call.store.collection(VARIABLES).get(uuid)
        if not visible_to(self.variables, call, variable):
            raise BadRequest(f"variable: variable {uuid} does not exist")
        if variable["setter"]["kind"] != "selector":
            raise BadRequest(f"variable: variable {variable['name']} takes its value from "
                             f"a {variable['setter']['kind']} setter, not from bound values")
        if variable["project_id"] != record["project_id"]:
            raise BadRequest(f"variable: variable {variable['name']} is in project "
                             f"{variable['project_id']}, not in {record['project_id']}")
        return record


def all_resources():
    profiles = Profiles()
    variables = Variables(profiles)
    return [profiles, variables, Values(variables)]
