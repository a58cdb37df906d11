"""Elements built into this appliance: what a manifest names as `$core.…` and `$dbaas.…`.

Each is one row of BUILTIN: its name, the version requirements on it are checked against,
the resource paths under it and the API collections they are, which of those collections
carry a data-plane status an element waits for, and what it exports to imports. `$core`
is the platform's own API; the others are declared by the capabilities that serve them
(their descriptor's `builtin_element`, appliance/capability.py).

They are never installed or uninstalled (no em_elements record): requirements on them are
met by this appliance, and a manifest of the same name cannot be installed.
"""

import importlib

import appliance
from appliance import capabilities

from . import links


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


def _declared():
    """The elements the capabilities declare (their descriptors' builtin_element)."""
    for capability in capabilities.descriptors():
        if capability.builtin_element:
            m = importlib.import_module(capability.builtin_element)
            yield BuiltinElement(m.NAME, m.VERSION, m.COLLECTIONS,
                                 follows_status=m.FOLLOWS_STATUS, exports=m.exports)


BUILTIN = {e.name: e for e in (
    BuiltinElement("core", appliance.__version__, _core_collection),
    *_declared(),
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
