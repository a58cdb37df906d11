"""The fields a create takes, for `add --help` and for naming references by name.

They come from the API's OpenAPI document (GET /v1/openapi.json), condensed into
create_fields.json beside this module: `--help` must work offline and before login, and
the CLI must not import the server side (it is a client that may run elsewhere).
tests/cli/test_consistency.py checks that the file matches the document a real API
serves; after changing a resource, regenerate it with

    python -m appliance.cli.schema openapi.json     # the document, from a running API
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

FIELDS_FILE = Path(__file__).with_name("create_fields.json")
_REFERENCE = re.compile(r"^\^\((/v1/[\w/{}]+?)/\)\?")


def _type_name(schema: dict) -> str:
    if "pattern" in schema and _REFERENCE.match(schema["pattern"]):
        return "reference"
    if "enum" in schema:
        return "one of " + "|".join(str(v) for v in schema["enum"] if v is not None)
    kind = schema.get("type", "json")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "json")
    if kind == "string" and schema.get("format") == "uuid":
        return "uuid"
    if kind == "array":
        return f"list of {_type_name(schema.get('items') or {})}"
    if kind == "object":
        kinds = [k for k in ((schema.get("properties") or {}).get("kind") or {}).get("enum", [])]
        return "object, kind " + "|".join(kinds) if kinds else "object"
    if kind not in ("string", "integer", "number", "boolean"):
        return "json"
    return kind


def fields_from_openapi(document: dict) -> dict:
    """{collection path: [{name, type, required, reference, description}]} for every POST
    on a collection (not an action) whose body is a declared resource's create schema."""
    schemas = document["components"]["schemas"]
    out = {}
    for path, operations in sorted(document["paths"].items()):
        body = (operations.get("post") or {}).get("requestBody")
        if not path.startswith("/v1/") or "/actions/" in path or body is None:
            continue
        ref = (body["content"].get("application/json", {}).get("schema") or {}).get("$ref", "")
        if not ref.endswith("Create"):
            continue
        schema = schemas[ref.rsplit("/", 1)[1]]
        required = set(schema.get("required", ()))
        rows = []
        for name, prop in schema.get("properties", {}).items():
            if name == "uuid":
                continue
            match = _REFERENCE.match(prop.get("pattern", ""))
            rows.append({"name": name, "type": _type_name(prop), "required": name in required,
                         "reference": match.group(1) if match else None,
                         "description": " ".join((prop.get("description") or "").split())})
        out[path] = rows
    return out


@functools.lru_cache(maxsize=1)
def _load() -> dict:
    try:
        return json.loads(FIELDS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _key(collection_path: str) -> str:
    """/v1/dns/domains/<uuid>/records/ -> /v1/dns/domains/{domain}/records"""
    path = collection_path.rstrip("/")
    if not path.startswith("/"):
        path = "/v1/" + path
    parts = path.split("/")
    for candidate in _load():
        theirs = candidate.split("/")
        if len(theirs) == len(parts) and all(
                a == b or (a.startswith("{") and a.endswith("}")) or b.startswith("<")
                for a, b in zip(theirs, parts)):
            return candidate
    return path


def create_fields(collection_path: str) -> list[dict]:
    return _load().get(_key(collection_path), [])


def references(collection_path: str) -> dict[str, str]:
    """field -> the collection it names, for the create body of `collection_path`."""
    return {f["name"]: f["reference"] for f in create_fields(collection_path)
            if f["reference"]}


def fields_help(collection_path: str, options: dict[str, str] | None = None,
                parser=None) -> str:
    """The create body's fields as a help section: name, type, required; `options` maps a
    field to the option that sets it (name -> -n/--name), kept where `parser` (when given)
    has that option."""
    rows = create_fields(collection_path)
    if not rows:
        return ""
    options = dict(options or {})
    if parser is not None:
        known = parser._option_string_actions
        options = {field: label for field, label in options.items()
                   if all(word in known for word in re.findall(r"--?[\w-]+", label))}
    width = max(len(f["name"]) for f in rows)
    lines = ["fields of the body (from the API's OpenAPI document; set as key=value, "
             "key:=json, or the option shown):"]
    for field in rows:
        kind = field["type"] + (f" {field['reference']}, a name or UUID"
                                if field["reference"] else "")
        extra = ", ".join(x for x in ("required" if field["required"] else "",
                                      options.get(field["name"], "")) if x)
        text = f"  {field['name']:<{width}}  {kind}" + (f" ({extra})" if extra else "")
        if field["description"]:
            text += f": {field['description'][:100]}"
        lines.append(text)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m appliance.cli.schema OPENAPI.json\n")
        return 2
    document = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    FIELDS_FILE.write_text(json.dumps(fields_from_openapi(document), indent=1,
                                      sort_keys=True) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {FIELDS_FILE}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
