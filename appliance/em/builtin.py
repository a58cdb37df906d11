"""Elements built into this appliance: what a manifest names as `$core.…` and `$dbaas.…`.

Each is one row of BUILTIN: its name, the version requirements on it are checked against,
the resource paths under it and the API collections they are (the one place that knows
that `$dbaas.types.sqldb.instances` is `/v1/sqldb/instances`), which of those collections
carry a data-plane status an element waits for, and what it exports to imports.

They are never installed or uninstalled (no em_elements record): requirements on them are
met by this appliance, and a manifest of the same name cannot be installed.
"""

import re

import appliance

from . import links

# `$dbaas.types.<type>.<collection>` is the API's `/v1/types/<type>/<collection>`: both
# spellings, `sqldb` (ours) and `postgres` (the reference's), are path families of the
# same records (appliance/sqldb/resources.py), so a resource's path reads as its manifest
# spells it, and its references (version, owner) are shown in that family's form
DBAAS_TYPES = ("sqldb", "postgres")
SQLDB_VERSIONS_KIND = "sqldb_versions"


def _types(family, collection):
    return f"/v1/types/{family}/{collection}"


# The reference's DBaaS element is at 2.x, and its manifests ask for `dbaas` from 2.1.0
# (communal_pg_cluster). What is built in here serves that element's API as the reference
# documents it (reference-api.md section 9: types/postgres paths, fields, ranges), so it
# answers to the version those manifests were written against; a manifest that needs a
# later DBaaS (from_version 2.2.0, 3.0.0) is refused rather than half served.
DBAAS_VERSION = "2.1.0"

_EXPORT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")


class BuiltinElement:
    def __init__(self, name, version, collections, follows_status=(), exports=None):
        self.name = name
        self.version = version
        # (segment, ...) -> API collection path; a callable for a whole family
        self._collections = collections
        # API collections whose records have a data-plane status (NEW .. ACTIVE, ERROR):
        # a resource of them is ready when its record is ACTIVE, not when it is written
        self.follows_status = frozenset(follows_status)
        self._exports = exports

    def collection(self, base):
        """The API collection of a resource path's segments after `$<name>`, or None."""
        if callable(self._collections):
            return self._collections(base)
        return self._collections.get(tuple(base))

    def paths(self):
        return [] if callable(self._collections) else [".".join(p) for p in self._collections]

    def exported(self, store):
        """{link segments: slot} of the resources it exports, slots shaped as an element's
        (`uuid`, `collection`)."""
        return self._exports(store) if self._exports else {}


# The reference's manifests name IAM's bindings by its resource kinds, not by their API
# paths (dbaas.yaml.j2: `$core.iam.permissionbinding`, `$core.iam.rolebinding`)
_CORE_ALIASES = {("iam", "permissionbinding"): "/v1/iam/permission_bindings",
                 ("iam", "rolebinding"): "/v1/iam/role_bindings"}


# Fields the reference's manifests give a collection that ours does not have, and what the
# Element Manager does with them. The reference's permission binding carries `project_id`
# (read-only in its API, written by its Element Manager: dbaas.yaml.j2): the project the
# binding was made for. Its IAM grants a role's permissions by role alone, wherever the
# role is bound, and so do ours (bindings are global): the field changes no grant. So it
# is accepted, must name an existing project, is kept in the element's slot (shown), and
# is not written to IAM.
REFERENCE_ONLY_FIELDS = {"/v1/iam/permission_bindings": ("project_id",)}


def reference_only(collection, field):
    return field in REFERENCE_ONLY_FIELDS.get(collection, ())


# The reference's built-in roles have fixed uuids, and its elements bind their new
# permissions to its owner role by that uuid (dbaas.yaml.j2, its manifest docs: "role:
# 726f6c65-...-0002  <- owner role UUID"). Ours are found by name (api-conventions 3), so
# a binding's `role` that is one of these uuids, and no role of ours, is our built-in
# role of that name.
REFERENCE_ROLES = {"726f6c65-0000-0000-0000-000000000001": "newcomer",
                   "726f6c65-0000-0000-0000-000000000002": "owner"}
ROLE_BINDING_COLLECTIONS = ("/v1/iam/permission_bindings", "/v1/iam/role_bindings")


def _core_collection(base):
    # $core.<service>.<collection>: the platform's own API, one collection per pair
    if tuple(base) in _CORE_ALIASES:
        return _CORE_ALIASES[tuple(base)]
    return f"/v1/{base[0]}/{base[1]}" if len(base) == 2 else None


def _dbaas_exports(store):
    """Every DBaaS version, under both spellings of the reference: a version named `15`
    is `$dbaas.types.sqldb.versions.$pg15` (and `...postgres...`), one named with a leading
    letter keeps its name. The first boot's version (name "15") is so `$pg15`."""
    exported = {}
    for version in store.collection(SQLDB_VERSIONS_KIND).records():
        name = str(version.get("name") or "")
        name = name if name[:1].isalpha() else f"pg{name}"
        if not _EXPORT_NAME.match(name):
            continue            # not nameable in a link (e.g. "15.4" -> pg15.4)
        for family in DBAAS_TYPES:
            exported[("types", family, "versions", f"${name}")] = {
                "uuid": version["uuid"], "collection": _types(family, "versions")}
    return exported


BUILTIN = {e.name: e for e in (
    BuiltinElement("core", appliance.__version__, _core_collection),
    BuiltinElement(
        "dbaas", DBAAS_VERSION,
        {("types", family, kind): _types(family, kind)
         for family in DBAAS_TYPES for kind in ("instances", "versions")},
        follows_status=[_types(family, "instances") + sub for family in DBAAS_TYPES
                        for sub in ("", "/<instance>/users", "/<instance>/databases")],
        exports=_dbaas_exports),
)}


def base_of(segments):
    """The segments of a resource path or link before its first `$name`."""
    base = []
    for segment in segments:
        if segment.startswith("$"):
            break
        base.append(segment)
    return tuple(base)


def provider_of(segments):
    """The built-in element a resource key (or link segments) is declared under."""
    base = base_of(segments)
    for element in BUILTIN.values():
        if element.collection(base) is not None:
            return element
    return None


def follows_status(collection):
    return any(collection in e.follows_status for e in BUILTIN.values())


def exported_slot(name, link_text, store):
    """The slot a built-in element exports for a link, or None."""
    element = BUILTIN.get(name)
    if element is None:
        return None
    return element.exported(store).get(links.parse_link(link_text).segments)
