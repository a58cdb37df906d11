"""Rendering: `--json` gives scripts the server's JSON untouched; people get tables.

Tables hold only what fits on a line: identifying columns first, then a few scalar fields,
long values cut. Anything cut is one `--json` away. Secret material is hidden from people's
views unless they ask for it (`--show-values`): a table on a shared screen or in a terminal
recording must not leak a password.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, TextIO

LEADING_COLUMNS = ("uuid", "name", "username", "status", "project_id")
# Timestamps are on every object and rarely what one scans a list for.
LOW_PRIORITY_COLUMNS = ("created_at", "updated_at")
MAX_COLUMNS = 7
TABLE_CELL_WIDTH = 40
DETAIL_VALUE_WIDTH = 120
ELLIPSIS = "..."
HIDDEN = "(hidden)"
# The sealed fields of the secret service (appliance/secret/resources.py).
SECRET_FIELDS = ("value", "default_value", "private_key", "key")


def write_json(stream: TextIO, data: Any) -> None:
    json.dump(data, stream, indent=2)
    stream.write("\n")


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def format_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ", ".join(value)
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def truncate(text: str, width: int) -> str:
    text = " ".join(text.split())  # a newline inside a cell would break the table
    if len(text) <= width:
        return text
    return text[: width - len(ELLIPSIS)] + ELLIPSIS


def choose_columns(rows: list[dict], wanted: Iterable[str] = ()) -> list[str]:
    """Identifying columns, then `wanted` ones, then other scalars, timestamps last."""
    keys: list[str] = []
    for row in rows:
        for key in row:
            if key not in keys:
                keys.append(key)
    scalar_keys = [key for key in keys if all(is_scalar(row.get(key)) for row in rows)]
    leading = [key for key in (*LEADING_COLUMNS, *wanted) if key in scalar_keys]
    others = [key for key in scalar_keys if key not in leading and key not in LOW_PRIORITY_COLUMNS]
    low = [key for key in LOW_PRIORITY_COLUMNS if key in scalar_keys]
    return (leading + others + low)[:MAX_COLUMNS]


def sensitive_fields(path: str | None) -> tuple[str, ...]:
    """The fields of the payload from `path` that people's views hide by default."""
    return SECRET_FIELDS if path and path.startswith("/v1/secret/") else ()


def _hide(item: dict, hidden: Iterable[str]) -> dict:
    # An unset value stays visible as "-": whether a secret has a value at all is not secret.
    return {key: HIDDEN if key in hidden and value is not None else value
            for key, value in item.items()}


def dns_record_row(record: dict) -> dict:
    """A DNS record as a table row: its name, address or content lifted out of `record`."""
    body = record.get("record") if isinstance(record.get("record"), dict) else {}
    content = body.get("content")
    if record.get("type") == "SOA":
        content = f"{body.get('primary_dns')} serial {body.get('serial')}"
    return {"uuid": record.get("uuid"), "type": record.get("type"), "name": body.get("name"),
            "address": body.get("address"), "content": content, "ttl": record.get("ttl"),
            "disabled": record.get("disabled")}


def certificate_row(cert: dict) -> dict:
    """A certificate as a table row: the reference CLI's columns, the domains joined."""
    return {"uuid": cert.get("uuid"), "project_id": cert.get("project_id"),
            "name": cert.get("name"), "email": cert.get("email"),
            "domains": ", ".join(cert.get("domains") or ()), "status": cert.get("status"),
            "expiration_at": cert.get("expiration_at")}


def node_row(node: dict) -> dict:
    """A node: where it runs and the address it is reached at, not its disk layout."""
    network = node.get("default_network") if isinstance(node.get("default_network"), dict) \
        else {}
    return {"uuid": node.get("uuid"), "name": node.get("name"), "status": node.get("status"),
            "address": network.get("ipv4"), "hypervisor": node.get("hypervisor"),
            "node_set": node.get("node_set"), "power_state": node.get("power_state"),
            "cores": node.get("cores"), "ram": node.get("ram"),
            "project_id": node.get("project_id")}


def set_row(node_set: dict) -> dict:
    return {"uuid": node_set.get("uuid"), "name": node_set.get("name"),
            "status": node_set.get("status"), "replicas": node_set.get("replicas"),
            "nodes": len(node_set.get("nodes") or ()), "cores": node_set.get("cores"),
            "ram": node_set.get("ram"), "project_id": node_set.get("project_id")}


def service_row(service: dict) -> dict:
    """A service: its command (the API's field `path`) and where it runs."""
    target = service.get("target") if isinstance(service.get("target"), dict) else {}
    kind = target.get("kind")
    where = target.get(kind) if kind in ("node", "node_set") else \
        ", ".join(target.get("nodes") or ()) if kind == "nodes" else kind
    return {"uuid": service.get("uuid"), "name": service.get("name"),
            "status": service.get("status"), "command": service.get("path"),
            "target": where, "type": (service.get("service_type") or {}).get("kind"),
            "target_status": service.get("target_status"),
            "project_id": service.get("project_id")}


def instance_row(instance: dict) -> dict:
    return {"uuid": instance.get("uuid"), "name": instance.get("name"),
            "status": instance.get("status"), "endpoint": instance.get("endpoint"),
            "nodes": instance.get("nodes_number"), "cpu": instance.get("cpu"),
            "ram": instance.get("ram"), "disk_size": instance.get("disk_size"),
            "project_id": instance.get("project_id")}


# collection path -> the row shape of its tables
ROW_SHAPES = {"/v1/secret/certificates": certificate_row, "/v1/compute/nodes": node_row,
              "/v1/compute/sets": set_row, "/v1/em/services": service_row,
              "/v1/sqldb/instances": instance_row}


def table_rows(path: str | None, rows: list) -> list:
    """Rows shaped for the collection they came from, where the generic shape says too little."""
    if path and path.rstrip("/").endswith("/records") and path.startswith("/v1/dns/"):
        return [dns_record_row(row) if isinstance(row, dict) else row for row in rows]
    shape = ROW_SHAPES.get((path or "").rstrip("/"))
    if shape:
        return [shape(row) if isinstance(row, dict) else row for row in rows]
    return rows


def detail_view(path: str | None, item: Any) -> Any:
    """One object shaped for people where a field's API name misleads: a service's `path`
    is the command it runs."""
    if isinstance(item, dict) and (path or "").startswith("/v1/em/services") and "path" in item:
        return {("command" if key == "path" else key): value for key, value in item.items()}
    return item


def is_empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def without_empty_columns(rows: list[dict]) -> list[dict]:
    """Rows without the fields that no row sets: a column of dashes only takes the room of
    one that says something."""
    keep = {key for row in rows for key, value in row.items() if not is_empty(value)}
    keep.update(("uuid", "name"))
    return [{key: value for key, value in row.items() if key in keep} for row in rows]


def render_table(rows: Iterable[Any], hidden: Iterable[str] = (), wanted: Iterable[str] = ()) -> str:
    rows = list(rows)
    if not rows:
        return "(no items)"
    if not all(isinstance(row, dict) for row in rows):
        return "\n".join(truncate(format_value(row), TABLE_CELL_WIDTH * 2) for row in rows)
    rows = [_hide(row, hidden) for row in without_empty_columns(rows)]
    columns = choose_columns(rows, wanted) or ["uuid"]
    cells = [[truncate(format_value(row.get(column)), TABLE_CELL_WIDTH) for column in columns] for row in rows]
    headers = [column.upper() for column in columns]
    widths = [max(len(header), *(len(line[index]) for line in cells)) for index, header in enumerate(headers)]
    lines = [headers, *cells]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)


def render_details(item: dict, hidden: Iterable[str] = ()) -> str:
    if not item:
        return "(empty)"
    item = _hide(item, hidden)
    width = max(len(str(key)) for key in item)
    return "\n".join(
        f"{str(key).ljust(width)}  {truncate(format_value(value), DETAIL_VALUE_WIDTH)}".rstrip()
        for key, value in item.items()
    )


def render(data: Any, hidden: Iterable[str] = (), wanted: Iterable[str] = ()) -> str:
    """The people's view of any payload: a list as a table, an object as key/value lines.

    Fields named in `hidden` show as "(hidden)" unless unset; a table keeps a column for
    the fields named in `wanted` before other fields."""
    if isinstance(data, list):
        return render_table(data, hidden, wanted)
    if isinstance(data, dict):
        return render_details(data, hidden)
    if data is None:
        return ""
    return format_value(data)


def render_identity(introspection: dict, endpoint: str) -> str:
    user = introspection.get("user_info") or {}
    name = user.get("username") or user.get("name") or "?"
    lines = [
        f"endpoint     {endpoint}",
        f"user         {name} ({user.get('uuid', '?')})",
        f"project      {introspection.get('project_id') or '(unscoped)'}",
    ]
    permissions = introspection.get("permissions") or []
    if permissions:
        lines.append(f"permissions  {permissions[0]}")
        lines.extend(f"             {permission}" for permission in permissions[1:])
    else:
        lines.append("permissions  (none)")
    return "\n".join(lines)
