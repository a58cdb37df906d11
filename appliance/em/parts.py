"""An element's resources, imports and exports, served read-only as the reference serves
them: under the element (`/v1/em/elements/<uuid>/resources/`, `imports/`, `exports/`) and
flat (`/v1/em/resources/`, ... filtered by `element=<uuid>`).

They are not stored on their own: each read works them out from the element records,
which stay the one source of truth (the builder writes `resources`, the install and
upgrade actions `imports` and `exports`). A copy in another file could lag behind or
outlive its element; a view cannot. They carry their element's `created_at` and
`updated_at`: they have no life of their own.
"""

import re
import uuid as uuidlib

from appliance.api.fields import Enum, Field, Reference, String
from appliance.api.resource import Resource
from state import order_key

from . import builtin, links

ELEMENTS = "/v1/em/elements"
RESOURCES = "/v1/em/resources"
# imports and exports have no identity in the manifest beyond their name: their uuid is
# derived from the element's and the name, so that it is the same on every read
NAMESPACE = uuidlib.UUID("6f1d8e0a-4b7c-5e3f-9a21-0c7d5b8e4f10")
PLACEHOLDER = re.compile(r"<[a-z_]+>")
# no length bound: nothing here is input, and a manifest's names and links are not bounded
TEXT = String(max_length=None)
SLOT_STATUSES = ("PENDING", "WAITING", "ACTIVE", "ERROR")


class View:
    """What the listing and paging code asks of a collection (records, get, by), over
    records computed once per request."""

    def __init__(self, records):
        self._records = sorted(records, key=order_key)
        self._index = {r["uuid"]: r for r in self._records}

    def records(self):
        return self._records

    def get(self, uuid):
        record = self._index.get(uuid)
        return None if record is None else dict(record)

    def by(self, field, value):
        return [r for r in self._records if r.get(field) == value]


def derived_uuid(element, part, name):
    return str(uuidlib.uuid5(NAMESPACE, f"{element['uuid']}/{part}/{name}"))


def _common(element, uuid):
    return {"uuid": uuid, "element": element["uuid"], "created_at": element["created_at"],
            "updated_at": element["updated_at"]}


def resource_rows(element, by_name):
    slots = element.get("resources") or {}
    for key, slot in slots.items():
        prefix, name = key.rsplit(".$", 1)
        collection = slot["collection"]
        if "<" in collection:
            # a sub-collection (/v1/dns/domains/<domain>/records): the placeholder is the
            # parent's uuid, the parent the slot keyed by this prefix minus its last part
            # (or, under an imported record, the slot's own `parent`)
            parent = slots.get(prefix.rsplit(".", 1)[0]) or {}
            collection = PLACEHOLDER.sub(slot.get("parent") or parent.get("uuid") or "",
                                         collection)
        provider = builtin.provider_of(key.split("."))
        provider = provider.name if provider else "core"
        yield {**_common(element, slot["uuid"]), "name": name,
               "kind": f"em_{provider}_" + "_".join(p for p in prefix.split(".")
                                                    if not p.startswith("$")),
               "link": f"${provider}.{key}", "resource": f"{collection}/{slot['uuid']}",
               "status": slot.get("status"), "status_reason": slot.get("reason")}


def import_rows(element, by_name):
    for name, imp in (element.get("imports") or {}).items():
        source = by_name.get(imp["element"][1:])
        slot = None
        if source is not None:
            slot = (source.get("resources") or {}).get(links.parse_link(imp["link"]).key)
        yield {**_common(element, derived_uuid(element, "imports", name)), "name": name,
               "kind": imp.get("kind") or "resource", "link": imp["link"],
               "from_element": source["uuid"] if source else None,
               "from_resource": slot["uuid"] if slot else None}


def export_rows(element, by_name):
    slots = element.get("resources") or {}
    for name, exp in (element.get("exports") or {}).items():
        slot = slots.get(links.parse_link(exp["link"]).key)
        yield {**_common(element, derived_uuid(element, "exports", name)), "name": name,
               "kind": exp.get("kind") or "resource", "link": exp["link"],
               "resource": slot["uuid"] if slot else None}


PARTS = {
    "resources": ("ElementResource", resource_rows, [
        Field("name", TEXT, read_only=True),
        Field("kind", TEXT, read_only=True,
              description="em_<provider element>_<service>_<collection>, as the reference"),
        Field("link", TEXT, read_only=True,
              description="the manifest's name for it: $core.<service>.<collection>.$<name> "
                          "or $dbaas.types.sqldb.instances.$<name>"),
        Field("resource", TEXT, read_only=True, filterable=False,
              description="API path of the record it manages (its uuid is this uuid)"),
        Field("status", Enum(*SLOT_STATUSES), read_only=True),
        Field("status_reason", TEXT, read_only=True),
    ]),
    "imports": ("ElementImport", import_rows, [
        Field("name", TEXT, read_only=True),
        Field("kind", Enum("resource"), read_only=True),
        Field("link", TEXT, read_only=True),
        Field("from_element", Reference(ELEMENTS), read_only=True,
              description="the installed element it comes from; null while none is"),
        Field("from_resource", Reference(RESOURCES), read_only=True,
              description="the resource it names; null until that exists"),
    ]),
    "exports": ("ElementExport", export_rows, [
        Field("name", TEXT, read_only=True),
        Field("kind", Enum("resource"), read_only=True),
        Field("link", TEXT, read_only=True),
        Field("resource", Reference(RESOURCES), read_only=True,
              description="the exported resource"),
    ]),
}


class ElementParts(Resource):
    """One part of every element, nested under one element or flat over all of them.
    Reading an element already shows these parts, so they share its permission
    (`em.element.read`)."""

    virtual = True      # a view of the elements' records: their links are the elements'

    def __init__(self, part, nested):
        name, self.rows, fields = PARTS[part]
        super().__init__(
            name=name, path=f"{ELEMENTS}/<element>/{part}" if nested else f"/v1/em/{part}",
            # the element records are what is read: watching and the store see one kind
            kind="em_elements", service="em", policy="element",
            operations=("list", "get"), parent=("element", ELEMENTS) if nested else None,
            description=f"the {part} of installed elements (read-only; they change "
                        "through the manifest actions)",
            fields=[Field("element", Reference(ELEMENTS), read_only=True)] + fields)

    def collection(self):
        elements = self.api.store.collection("em_elements").records()
        by_name = {e.get("name"): e for e in elements}
        return View(row for e in elements for row in self.rows(e, by_name))


def all_resources():
    return [ElementParts(part, nested) for part in PARTS for nested in (True, False)]
