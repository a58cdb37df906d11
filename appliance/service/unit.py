"""A service record -> its systemd unit: the unit's name and text. Pure (docs/services.md).

The command runs as `/bin/sh -c "<command>"`. systemd reads that line in three passes, so
the command is escaped for each: specifiers (`%` -> `%%`), then C-style unquoting inside
the double quotes (`\\` -> `\\\\`, `"` -> `\\"`), then environment variables (`$` -> `$$`).
A newline or other control character would end the directive; the API refuses them
(COMMAND_PATTERN), and `render` refuses them again rather than write a broken unit.

The reference's `before`/`after` meaning is kept: `before` holds what runs before this
service (a shell command becomes ExecStartPre=, a service becomes After=<its unit>),
`after` what runs after it (ExecStartPost=, Before=<its unit>).
"""

import re

PREFIX = "appliance-srv-"
# one line of printable text: the API's pattern of commands
COMMAND_PATTERN = "^[^\\x00-\\x1f\\x7f]*$"
_CONTROL = re.compile("[\x00-\x1f\x7f]")
SYSTEMD_TYPE = {"simple": "simple", "monopoly": "simple",
                "oneshot": "oneshot", "monopoly_oneshot": "oneshot"}


class UnitError(ValueError):
    pass


def unit_name(service, item_uuid):
    """`appliance-srv-<name>-<item uuid>.service`, `appliance-srv-<item uuid>.service` for
    a service with no name. The target item's uuid (per node and service), not the
    service's: two agents on one systemd (the appliance's own and a second node's) each
    get their own unit of a service that targets both. The whole uuid: two services of
    one name never share a unit."""
    name = service.get("name") or ""
    return f"{PREFIX}{name + '-' if name else ''}{item_uuid}.service"


def quote(command):
    """`command` as one double-quoted word of a unit's Exec line, meaning itself."""
    if _CONTROL.search(command):
        raise UnitError("a command must be one line without control characters")
    escaped = (command.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
               .replace("$", "$$"))
    return f'"{escaped}"'


def shell(command):
    return f"/bin/sh -c {quote(command)}"


def _account(value, what):
    if value is None:
        return None
    if not re.fullmatch(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$", value):
        raise UnitError(f"{what} {value!r} is not a user or group name")
    return value


def render(service, units=None):
    """The unit text of `service` (a record). `units` maps the uuid of each other service
    on the same node to its unit name; an ordering entry naming a service that is not
    there orders nothing on this node."""
    units = units or {}
    kind = service["service_type"]["kind"]
    oneshot = SYSTEMD_TYPE[kind] == "oneshot"
    after, before, pre, post = [], [], [], []
    for entry in service.get("before") or ():
        if entry["kind"] == "shell":
            pre.append(f"ExecStartPre=+{shell(entry['command'])}")
        elif entry["service"] in units:
            after.append(units[entry["service"]])
    for entry in service.get("after") or ():
        if entry["kind"] == "shell":
            post.append(f"ExecStartPost=+{shell(entry['command'])}")
        elif entry["service"] in units:
            before.append(units[entry["service"]])
    lines = ["[Unit]",
             f"Description=appliance service {service.get('name') or ''} "
             f"({service['uuid']})".replace("%", "%%").replace("  ", " "),
             "After=network.target" + "".join(f" {u}" for u in after)]
    if before:
        lines.append("Before=" + " ".join(before))
    lines += ["", "[Service]", f"Type={SYSTEMD_TYPE[kind]}"]
    lines += pre
    lines.append(f"ExecStart={shell(service['path'])}")
    lines += post
    lines.append(f"User={_account(service.get('user') or 'root', 'user')}")
    group = _account(service.get("group"), "group")
    if group:
        lines.append(f"Group={group}")
    # a oneshot runs once per delivery or restart: its exit code stays what it was
    # (the reference restarts a failed one every 5 s, which hides the code it reports)
    lines += [f"Restart={'no' if oneshot else 'always'}", "RestartSec=5s",
              "TimeoutStopSec=30", "", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)
