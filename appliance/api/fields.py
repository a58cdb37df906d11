"""Field types of a resource declaration.

A type knows three things: its JSON Schema (used both to validate bodies and to publish
the OpenAPI document), how to parse a query-string filter value, and how to turn stored
values into what a client sees (references become paths).
"""

import copy
import re

from appliance.kinds import UUID_PATTERN

from .patterns import compiled

# the declared form (published with `$`, appliance/kinds.py) and the one that checks input
# (`$` -> `\Z`)
UUID_RE = compiled(UUID_PATTERN)


class FilterError(ValueError):
    pass


class FieldType:
    type_name = "value"

    def schema(self):
        raise TypeError(f"{type(self).__name__} must define schema()")

    def parse_filter(self, text):
        return text

    def to_input(self, value):
        """Normalize an accepted input form to the stored form."""
        return value

    def render(self, value):
        return value


class String(FieldType):
    type_name = "string"

    def __init__(self, max_length=255, min_length=None, pattern=None, format=None):
        self.max_length, self.min_length = max_length, min_length
        self.pattern, self.format = pattern, format

    def schema(self):
        s = {"type": "string"}
        if self.max_length is not None:
            s["maxLength"] = self.max_length
        if self.min_length is not None:
            s["minLength"] = self.min_length
        if self.pattern is not None:
            s["pattern"] = self.pattern
        if self.format is not None:
            s["format"] = self.format
        return s


class Text(String):
    def __init__(self, max_length=65536):
        super().__init__(max_length=max_length)


class Integer(FieldType):
    type_name = "integer"

    def __init__(self, minimum=None, maximum=None):
        self.minimum, self.maximum = minimum, maximum

    def schema(self):
        s = {"type": "integer"}
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        return s

    def parse_filter(self, text):
        try:
            return int(text)
        except ValueError:
            raise FilterError("must be an integer") from None


class Boolean(FieldType):
    type_name = "boolean"

    def schema(self):
        return {"type": "boolean"}

    def parse_filter(self, text):
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise FilterError("must be true or false")


class Enum(FieldType):
    type_name = "enum"

    def __init__(self, *values):
        self.values = list(values)

    def schema(self):
        return {"type": "string", "enum": self.values}

    def parse_filter(self, text):
        if text not in self.values:
            raise FilterError("must be one of " + ", ".join(self.values))
        return text


class UUID(FieldType):
    type_name = "uuid"

    def schema(self):
        return {"type": "string", "format": "uuid", "pattern": UUID_PATTERN}

    def parse_filter(self, text):
        if not UUID_RE.match(text):
            raise FilterError("must be a UUID")
        return text.lower()

    def to_input(self, value):
        return value.lower() if isinstance(value, str) and UUID_RE.match(value) else value


class DateTime(FieldType):
    type_name = "datetime"

    def schema(self):
        return {"type": "string", "format": "date-time"}


class Reference(FieldType):
    """A link to another resource: stored as its uuid, shown as its path, accepted as either."""
    type_name = "reference"

    def __init__(self, collection_path):
        self.collection_path = collection_path.rstrip("/")
        self._path_re = compiled("^" + re.escape(self.collection_path) + r"/([^/]+)/?$")

    def schema(self):
        return {"type": "string", "pattern": r"^(%s/)?[0-9a-fA-F-]{36}$" % re.escape(
            self.collection_path)}

    def parse_filter(self, text):
        # the path is taken as well: clients filter by what they read (the reference's
        # CLI sends variable=/v1/vs/variables/<uuid>)
        return UUID().parse_filter(self.to_input(text))

    def to_input(self, value):
        if isinstance(value, str):
            m = self._path_re.match(value)
            if m:
                value = m.group(1)
            if UUID_RE.match(value):
                return value.lower()
        return value

    def render(self, value):
        return None if value is None else f"{self.collection_path}/{value}"


def accepts_null(schema):
    """Whether a JSON schema takes null: a property that does gives null a meaning of its
    own (docs/validation.md, "null")."""
    if not isinstance(schema, dict):
        return True
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return "null" in kinds
    if "const" in schema:
        return schema["const"] is None
    if "enum" in schema:
        return None in schema["enum"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return any(accepts_null(s) for s in schema[key])
    return True


def _branches(schema, value):
    """The schema and those of its oneOf/anyOf branches that fit value's `kind`."""
    found = [schema]
    for key in ("oneOf", "anyOf"):
        for branch in schema.get(key) or ():
            kind = ((branch.get("properties") or {}).get("kind") or {}) \
                if isinstance(branch, dict) else {}
            if "const" in kind and kind["const"] != value.get("kind"):
                continue
            if "enum" in kind and value.get("kind") not in kind["enum"]:
                continue
            found.append(branch)
    return found


def nulls_as_absent(schema, value):
    """value with each null dropped where its property refuses null, or replaced by the
    property's declared `default`: a client that sends `"storage_pool": null` means "not
    given" (the reference's clients do). A required property keeps its null (refused).
    Recurses into objects and lists of objects."""
    if isinstance(value, list) and isinstance(schema, dict) and isinstance(
            schema.get("items"), dict):
        return [nulls_as_absent(schema["items"], v) for v in value]
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return value
    declared, required = {}, set()
    for branch in _branches(schema, value):
        required.update(branch.get("required") or ())
        for name, sub in (branch.get("properties") or {}).items():
            declared.setdefault(name, []).append(sub)
    out = {}
    for name, v in value.items():
        subs = declared.get(name)
        if not subs or (v is None and name in required):
            # a required one keeps its null, to be refused for what it is
            out[name] = v
        elif v is None and not any(accepts_null(s) for s in subs):
            defaults = [s["default"] for s in subs if isinstance(s, dict) and "default" in s]
            if defaults:
                out[name] = copy.deepcopy(defaults[0])
        else:
            out[name] = nulls_as_absent(subs[0] if len(subs) == 1 else {"anyOf": subs}, v)
    return out


class Object(FieldType):
    """A JSON object checked by `schema`. `kinds` ({kind: schema}) names the schemas of a
    kind-object whose kinds are checked by the resource's own code (disk_spec), so that
    reading nulls as absent knows their properties."""
    type_name = "object"

    def __init__(self, schema=None, kinds=None):
        self._schema = schema or {"type": "object"}
        self.kinds = kinds or {}

    def schema(self):
        return dict(self._schema)

    def to_input(self, value):
        if isinstance(value, dict):
            schema = self.kinds.get(value.get("kind"), self._schema) \
                if isinstance(value.get("kind"), str) else self._schema
            return nulls_as_absent(schema, value)
        return value

    def parse_filter(self, text):
        raise FilterError("cannot filter on an object")


class List(FieldType):
    """A list. A filter value matches a record whose list contains it."""
    type_name = "list"

    def __init__(self, items, max_items=None):
        self.items = items
        self.max_items = max_items

    def schema(self):
        s = {"type": "array", "items": self.items.schema()}
        if self.max_items is not None:
            s["maxItems"] = self.max_items
        return s

    def parse_filter(self, text):
        return self.items.parse_filter(text)


def Tags():
    return List(String(max_length=255), max_items=64)


class Field:
    """One field of a resource.

    read_only   set by the service; a client writing it gets 403
    create_only writable on create, read-only afterwards
    write_only  accepted, never returned (passwords)
    hidden      stored, never in the API at all (next_refresh)
    omit_unset  left out of a read when unset instead of rendered as null
    """

    def __init__(self, name, type, *, required=False, read_only=False, create_only=False,
                 write_only=False, hidden=False, omit_unset=False, nullable=True,
                 default=None, description="", filterable=True, sortable=True):
        self.name = name
        self.type = type
        self.required = required
        self.read_only = read_only
        self.create_only = create_only
        self.write_only = write_only
        self.hidden = hidden
        self.omit_unset = omit_unset
        self.nullable = nullable and not required
        self.default = default
        self.description = description
        self.filterable = filterable and not write_only and not hidden
        self.sortable = sortable and not write_only and not hidden and not isinstance(
            type, (Object, List))

    def default_value(self):
        return self.default() if callable(self.default) else self.default

    def input_schema(self):
        s = self.type.schema()
        if self.nullable and "type" in s:
            s["type"] = [s["type"], "null"]
            if "enum" in s:
                s["enum"] = s["enum"] + [None]
        if self.description:
            s = {**s, "description": self.description}
        return s

    def output_schema(self):
        s = self.type.schema()
        s.pop("pattern", None)
        if self.type.type_name == "reference":
            s = {"type": "string", "description": f"path under {self.type.collection_path}/"}
        if not self.required or self.read_only:
            s = {"anyOf": [s, {"type": "null"}]}
        if self.description:
            s["description"] = self.description
        return s
