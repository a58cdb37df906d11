"""What a manifest is, and the plan it gives: every resource with its collection, body and
the resources it depends on, in an order where each comes after what it links to.

Everything here is checked without touching the store except for the registry of
collections (`api.resources`): structure (JSON Schema, errors name the key path), versions
and requirements, resource paths, body fields and the types of literal values, links
(each named when wrong), exports, and cycles. What depends on installed elements
(requirements met, imports exported) is checked at install time (actions.py).
"""

import re

from appliance import versions
from appliance.api.errors import BadRequest
from appliance.api.validation import Validator

from . import builtin, links

# The reference's element names: its published manifests are `passwords-example`,
# `core-node-set-example`, and spec 8 gives a name as a string of up to 255 characters.
# Lower case, digits, `_` and `-`, from a letter: every such name is also an IDENT of the
# link grammar (links.py), so `$passwords-example.imports.$x` needs no quoting.
NAME_TEXT = r"[a-z][a-z0-9_-]{0,254}"
NAME = rf"^{NAME_TEXT}$"
RESOURCE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,127}\Z")
# $<built-in element>.<segment>..., or a sub-collection under one resource of this
# manifest: ...$<parent>.<sub> (e.g. $core.dns.domains.$zone.records,
# $dbaas.types.sqldb.instances.$pg.users); builtin.py maps the segments to a collection
RESOURCE_PATH = re.compile(r"^\$([a-z][a-z0-9_]*)((?:\.[a-z][a-z0-9_]*)+)"
                           r"(?:\.\$([A-Za-z_][A-Za-z0-9_-]*)\.([a-z][a-z0-9_]*))?\Z")
# a sub-collection under an imported resource: $<this element>.imports.$<import>.<sub>
IMPORTED_PARENT_PATH = re.compile(rf"^\$({NAME_TEXT})\.imports\.\$([A-Za-z_][A-Za-z0-9_-]*)"
                                  r"\.([a-z][a-z0-9_]*)\Z")
ELEMENT_REF = rf"^\${NAME_TEXT}$"

UUID_TEXT = re.compile(rf"^{links.UUID}\Z")

SCHEMA = {
    "type": "object",
    "required": ["name", "version", "resources"],
    "additionalProperties": False,
    "properties": {
        "uuid": {"type": "string"},
        "name": {"type": "string", "pattern": NAME},
        "version": {"type": "string", "maxLength": 255},
        "description": {"type": ["string", "null"], "maxLength": 4096},
        "schema_version": {"type": "integer", "enum": [1]},
        "api_version": {"type": "string", "enum": ["v1"]},
        "requirements": {"type": ["object", "null"], "propertyNames": {"pattern": NAME},
                         "additionalProperties": {
            "type": ["object", "null"], "additionalProperties": False,
            "properties": {k: {"type": "string"}
                           for k in ("from_version", "to_version", "version")}}},
        "resources": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": {"type": "object"}}},
        "imports": {"type": ["object", "null"], "additionalProperties": {
            "type": "object", "required": ["element", "link"], "additionalProperties": False,
            "properties": {"element": {"type": "string", "pattern": ELEMENT_REF},
                           "kind": {"enum": ["resource"]},
                           "link": {"type": "string"}}}},
        "exports": {"type": ["object", "null"], "additionalProperties": {
            "type": "object", "required": ["link"], "additionalProperties": False,
            "properties": {"link": {"type": "string"}, "kind": {"enum": ["resource"]}}}},
    },
}
_STRUCTURE = Validator(SCHEMA)


class Entry:
    """One resource of the manifest."""

    def __init__(self, key, collection, name, body, depends_on, parent=None, where=None):
        self.key = key                  # "secret.secrets.$db"
        self.collection = collection    # "/v1/secret/secrets" (API registry key)
        self.name = name
        self.body = body
        self.depends_on = depends_on    # keys of own resources it links to
        self.parent = parent            # (field, key of the parent entry) in a sub-collection
        self.where = where or key       # where it is declared, for messages

    def __repr__(self):
        return f"<Entry {self.key}>"


class Plan:
    def __init__(self, manifest, entries):
        self.manifest = manifest
        self.name = manifest["name"]
        self.version = versions.parse(manifest["version"])
        self.entries = entries          # in creation order
        self.by_key = {e.key: e for e in entries}
        self.imports = manifest.get("imports") or {}
        self.exports = manifest.get("exports") or {}
        self.requirements = {
            name: versions.constraints_from_requirement(req or {})
            for name, req in (manifest.get("requirements") or {}).items()}


def _fail(where, message):
    raise BadRequest(f"{where}: {message}")


def _own_key(plan_name, link, where):
    """The key of a link to one of this manifest's own resources: named after this
    element, or after the built-in element its path is declared under."""
    if link.element != plan_name:
        provider = builtin.provider_of(link.segments)
        if link.element not in builtin.BUILTIN:
            _fail(where, f"link {link.text} names element {link.element}; resources of "
                         "other elements are reached through imports")
        if provider is not None and provider.name != link.element:
            _fail(where, f"link {link.text}: {'.'.join(builtin.base_of(link.segments))} "
                         f"is declared under ${provider.name}, not ${link.element}")
    return link.key


def build_plan(manifest, api):
    if not isinstance(manifest, dict):
        raise BadRequest("a manifest must be a mapping")
    _STRUCTURE.check(manifest)
    name = manifest["name"]
    try:
        versions.parse(manifest["version"])
    except versions.VersionError as e:
        _fail("version", str(e))
    for req_name, req in (manifest.get("requirements") or {}).items():
        try:
            versions.constraints_from_requirement(req or {})
        except versions.ConstraintFormatError as e:
            _fail(f"requirements.{req_name}", str(e))
    imports = manifest.get("imports") or {}
    for imp_name, imp in imports.items():
        try:
            link = links.parse_link(imp["link"])
        except links.LinkError as e:
            _fail(f"imports.{imp_name}.link", str(e))
        if link.fields or link.is_import:
            _fail(f"imports.{imp_name}.link", "must name a resource (no :field, no imports)")

    entries = {}
    for path, named in manifest["resources"].items():
        resource, parent, prefix = _collection_of(path, api, name, imports)
        for res_name, body in named.items():
            where = f"resources.{path}.{res_name}"
            if not RESOURCE_NAME.match(res_name):
                _fail(where, "a resource name is letters, digits, _ and -")
            key = f"{prefix}.${res_name}"
            depends = _check_body(resource, body, where, name, imports)
            if parent:
                _check_parent_field(body, parent, where)
                if not parent[1].startswith("imports."):
                    depends.add(parent[1])      # an imported parent is no own resource
            entries[key] = Entry(key, resource.path, res_name, body, depends, parent, where)

    _depend_on_declared_uuids(entries)
    for key, entry in entries.items():
        missing = sorted(d for d in entry.depends_on if d not in entries)
        if entry.parent and entry.parent[1] in missing:
            _fail(entry.where, f"declared under {entry.parent[1]}: no such resource in this "
                               "manifest")
        if missing:
            _fail(entry.where, f"link to {missing[0]}: no such resource in this manifest")
    for exp_name, exp in (manifest.get("exports") or {}).items():
        try:
            link = links.parse_link(exp["link"])
        except links.LinkError as e:
            _fail(f"exports.{exp_name}.link", str(e))
        key = _own_key(name, link, f"exports.{exp_name}.link")
        if link.fields or key not in entries:
            # the reference refuses it too, at install (docs/element-manager.md)
            alike = [k for k in entries if k.rsplit(".", 1)[-1] == link.segments[-1]]
            hint = f" (its {link.segments[-1]} is {alike[0]})" if alike else ""
            _fail(f"exports.{exp_name}.link", f"{exp['link']} names no resource of this "
                                              f"manifest{hint}")
    return Plan(manifest, _ordered(entries))


def _collection_of(path, api, plan_name, imports):
    """(API resource, parent or None, key prefix) of a resource path of the manifest."""
    m = IMPORTED_PARENT_PATH.match(path)
    if m:
        return _under_import(path, api, plan_name, imports, *m.groups())
    m = RESOURCE_PATH.match(path)
    if not m:
        _fail(f"resources.{path}", "a resource path is $<element>.<service>.<collection> "
                                   "of a built-in element ($core.secret.passwords, "
                                   "$dbaas.types.sqldb.instances), or "
                                   "$<this element>.imports.$<import>.<sub-collection>")
    element_name, base, parent_name, sub = m.groups()
    base = tuple(base[1:].split("."))
    element = builtin.BUILTIN.get(element_name)
    if element is None:
        under = ", ".join("$" + n for n in builtin.BUILTIN)
        _fail(f"resources.{path}", f"${element_name} is no built-in element: resources "
                                   f"are declared under {under}")
    collection = element.collection(base)
    resource, parent = (api.resources.get(collection) if collection else None), None
    known = element.paths()
    if resource is not None and sub is not None:
        parent_path = resource.path
        subs = _sub_collections(api, parent_path)
        known = [f"{'.'.join(base)}.$<name>.{r.path.rsplit('/', 1)[1]}" for r in subs]
        resource = next((r for r in subs if r.path.endswith(f"/{sub}")), None)
        if resource is not None:
            parent = (resource.parent[0], f"{'.'.join(base)}.${parent_name}")
    if resource is None or "create" not in resource.operations:
        hint = f" (under ${element_name}: {', '.join(known)})" if known else ""
        _fail(f"resources.{path}", f"unknown resource path (no such collection){hint}")
    prefix = ".".join(base) + (f".${parent_name}.{sub}" if sub else "")
    return resource, parent, prefix


def _sub_collections(api, parent_path):
    return [r for r in api.resources.values() if r.parent and r.parent[1] == parent_path]


def _under_import(path, api, plan_name, imports, element_name, import_name, sub):
    """A sub-collection under an imported resource, as the reference declares DNS records
    in the domain another element exports (dbaas.yaml.j2:
    `$dbaas.imports.$core_local_domain.records`): the items belong to the imported record,
    whose uuid fills their parent field at install. The import is reached only through
    this element's name, as every import link is."""
    where = f"resources.{path}"
    if element_name != plan_name:
        _fail(where, f"imports are named $<this element>.imports (${plan_name}.imports."
                     f"${import_name}.{sub})")
    imp = imports.get(import_name)
    if imp is None:
        _fail(where, f"no import {import_name} in this manifest")
    segments = links.parse_link(imp["link"]).segments
    base = builtin.base_of(segments)
    provider = builtin.provider_of(segments)
    collection = provider.collection(base) if provider else None
    parent_resource = api.resources.get(collection) if collection else None
    if parent_resource is None or len(base) != len(segments) - 1:
        _fail(where, f"import {import_name} ({imp['link']}) is no resource of a collection "
                     "with sub-collections")
    subs = _sub_collections(api, parent_resource.path)
    resource = next((r for r in subs if r.path.endswith(f"/{sub}")), None)
    if resource is None or "create" not in resource.operations:
        known = ", ".join(r.path.rsplit("/", 1)[1] for r in subs) or "none"
        _fail(where, f"unknown resource path: {parent_resource.name} has no sub-collection "
                     f"{sub} (it has: {known})")
    parent_key = f"imports.${import_name}"
    return resource, (resource.parent[0], parent_key), f"{parent_key}.{sub}"


def _check_parent_field(body, parent, where):
    """A sub-collection item may name its parent (the spec's users and databases carry
    `instance`), but only as a link to the resource it is declared under: a literal uuid
    or another resource would put it under a parent the manifest does not say."""
    field, parent_key = parent
    if field not in body:
        return
    value = body[field]
    expr = links.parse_expression(value) if isinstance(value, str) else None
    if not isinstance(expr, links.Link) or expr.key != parent_key \
            or expr.fields not in ((), ("uuid",)):
        _fail(f"{where}.{field}", f"must link to the resource it is declared under "
                                  f"($<element>.{parent_key}[:uuid])")


def _check_body(resource, body, where, element, imports):
    """Fields known and writable, literal values of the right type, links well formed.
    Returns the own resources the body links to."""
    depends = set()
    for field_name, value in body.items():
        field = resource.field(field_name)
        at = f"{where}.{field_name}"
        if builtin.reference_only(resource.path, field_name):
            if not _has_expression(value) and not (
                    isinstance(value, str) and UUID_TEXT.match(value)):
                _fail(at, "must be a project's uuid or a link to one")
            continue
        if field is None or field.hidden:
            _fail(at, f"unknown field of {resource.name}")
        if field.read_only and field_name != "uuid":
            _fail(at, "read-only field")
    for path, expr in _expressions(body, where):
        for link in expr.links():
            at = f"{where}.{'.'.join(path)}"
            if link.is_import:
                if link.element != element:
                    _fail(at, f"link {link.text}: imports are named $<this element>.imports")
                imp = link.segments[1][1:]
                if imp not in imports:
                    _fail(at, f"link {link.text}: no import {imp} in this manifest")
            else:
                depends.add(_own_key(element, link, at))
    literal = {k: v for k, v in body.items() if not _has_expression(v)
               and not builtin.reference_only(resource.path, k)}
    required = [f.name for f in resource.fields if f.required and f.name not in body
                and f.default is None]
    if required:
        _fail(f"{where}.{required[0]}", "required")
    for field_name, value in literal.items():
        if field_name == "uuid":
            continue
        resource.field_validator(field_name).check_at({field_name: value}, where)
    return depends


def _expressions(body, where):
    for field_name, value in body.items():
        try:
            yield from links.expressions(value, (field_name,))
        except links.LinkError as e:
            _fail(f"{where}.{field_name}", str(e))


def _has_expression(value):
    try:
        return any(True for _ in links.expressions(value))
    except links.LinkError:
        return True


def _literal_strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _literal_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _literal_strings(v)


def _depend_on_declared_uuids(entries):
    """A literal uuid that is the `uuid` another resource of this manifest declares is a
    reference to it, as a link would be: the reference's DBaaS element binds its user by
    the uuid it gives that user (`user: 251cf57a-...`, "Hack, should be fixed"), and the
    binding must come after the user whatever order the resources are listed in."""
    declared = {str(e.body["uuid"]).lower(): key for key, e in entries.items()
                if isinstance(e.body.get("uuid"), str)}
    if not declared:
        return
    for key, entry in entries.items():
        body = {k: v for k, v in entry.body.items() if k != "uuid"}
        for text in _literal_strings(body):
            other = declared.get(text.strip().lower())
            if other is not None and other != key:
                entry.depends_on.add(other)


def _ordered(entries):
    """Creation order: each resource after the ones it links to; a cycle is a 400 that
    names it. Among free resources, manifest order is kept (stable and readable)."""
    order, state = [], {}

    def visit(key, trail):
        if state.get(key) == "done":
            return
        if state.get(key) == "visiting":
            cycle = trail[trail.index(key):] + [key]
            raise BadRequest("resources: dependency cycle " + " -> ".join(cycle))
        state[key] = "visiting"
        for dep in sorted(entries[key].depends_on):
            visit(dep, trail + [key])
        state[key] = "done"
        order.append(entries[key])

    for key in entries:
        visit(key, [])
    return order
