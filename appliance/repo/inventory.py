"""The inventory format of spec 2.7, checked once where it enters.

    {"elements": {name: {version: {name, version, artifacts, configs, images, manifests,
                                   templates, index: {category: {uuid: file name}}}}}}

An artifact's URN is `<category>:<uuid>`.
"""

from appliance import versions

CATEGORIES = ("artifacts", "configs", "images", "manifests", "templates")


class InventoryError(ValueError):
    pass


def entry(name, version, files=None, index=None):
    """An inventory entry; files and index default to empty."""
    files = files or {}
    return {"name": name, "version": version,
            **{c: list(files.get(c, [])) for c in CATEGORIES},
            "index": {c: dict((index or {}).get(c, {})) for c in CATEGORIES}}


def check(document):
    """{(name, version): entry} of a valid inventory, else InventoryError naming the spot."""
    if not isinstance(document, dict) or not isinstance(document.get("elements"), dict):
        raise InventoryError("an inventory is an object with an `elements` mapping")
    found = {}
    for name, by_version in document["elements"].items():
        if not isinstance(by_version, dict):
            raise InventoryError(f"elements.{name}: must map versions to entries")
        for version, item in by_version.items():
            where = f"elements.{name}.{version}"
            if not isinstance(item, dict):
                raise InventoryError(f"{where}: must be an object")
            try:
                versions.parse(version)
            except versions.VersionError as e:
                raise InventoryError(f"{where}: {e}") from None
            if item.get("name", name) != name or item.get("version", version) != version:
                raise InventoryError(f"{where}: name/version differ from their keys")
            for category in CATEGORIES:
                files = item.get(category, [])
                if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                    raise InventoryError(f"{where}.{category}: must be a list of file names")
            index = item.get("index", {})
            if not isinstance(index, dict):
                raise InventoryError(f"{where}.index: must be an object")
            for category, mapping in index.items():
                if category not in CATEGORIES or not isinstance(mapping, dict):
                    raise InventoryError(f"{where}.index.{category}: unknown category or "
                                         "not an object")
            found[(name, version)] = entry(name, version, item, index)
    return found


def artifacts(item):
    """[(urn, file name)] of an entry's index."""
    return [(f"{category}:{uuid}", file_name)
            for category in CATEGORIES
            for uuid, file_name in sorted(item.get("index", {}).get(category, {}).items())]
