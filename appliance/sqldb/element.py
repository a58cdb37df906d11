"""`$dbaas.…` in a manifest: DBaaS as an element built into the appliance (declared by
this capability's descriptor, read by appliance/em/builtin.py).

`$dbaas.types.<type>.<collection>` is the API's `/v1/types/<type>/<collection>`: both
spellings, `sqldb` (ours) and `postgres` (the reference's), are path families of the same
records (resources.py), so a resource's path reads as its manifest spells it, and its
references (version, owner) are shown in that family's form.
"""

import re

NAME = "dbaas"
TYPES = ("sqldb", "postgres")
VERSIONS_KIND = "sqldb_versions"

# The reference's DBaaS element is at 2.x, and its manifests ask for `dbaas` from 2.1.0
# (communal_pg_cluster). What is built in here serves that element's API as the reference
# documents it (reference-api.md section 9: types/postgres paths, fields, ranges), so it
# answers to the version those manifests were written against; a manifest that needs a
# later DBaaS (from_version 2.2.0, 3.0.0) is refused rather than half served.
VERSION = "2.1.0"

_EXPORT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")


def _types(family, collection):
    return f"/v1/types/{family}/{collection}"


# resource path segments after `$dbaas` -> API collection
COLLECTIONS = {("types", family, kind): _types(family, kind)
               for family in TYPES for kind in ("instances", "versions")}
# API collections whose records have a data-plane status an element waits for
FOLLOWS_STATUS = [_types(family, "instances") + sub for family in TYPES
                  for sub in ("", "/<instance>/users", "/<instance>/databases")]


def exports(store):
    """Every DBaaS version, under both spellings of the reference: a version named `15`
    is `$dbaas.types.sqldb.versions.$pg15` (and `...postgres...`), one named with a leading
    letter keeps its name. The first boot's version (name "15") is so `$pg15`."""
    exported = {}
    for version in store.collection(VERSIONS_KIND).records():
        name = str(version.get("name") or "")
        name = name if name[:1].isalpha() else f"pg{name}"
        if not _EXPORT_NAME.match(name):
            continue            # not nameable in a link (e.g. "15.4" -> pg15.4)
        for family in TYPES:
            exported[("types", family, "versions", f"${name}")] = {
                "uuid": version["uuid"], "collection": _types(family, "versions")}
    return exported
