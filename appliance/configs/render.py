"""A config's content from its body: pure, no store, no I/O (links are resolved by the
caller's `resolve`, which raises `appliance.em.links.Unavailable` while a value is missing).

Template syntax (docs/configs.md): `{{ name }}` is replaced by the variable `name`, and
that is all. There are no expressions, filters, loops or code, so a template cannot do
anything but substitute; the output is not scanned again, so a value holding `{{ x }}`
comes out as it is. A `{{ ... }}` that is not a declared variable's name is refused at
create. A variable is a literal (string, number, boolean, null) or, for a string starting
with `$`, an Element Manager link (`$core.secret.passwords.$<uuid>:value`).
"""

import json
import re

from appliance.em import links

HOLE = re.compile(r"\{\{(.*?)\}\}", re.S)
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


class TemplateError(ValueError):
    """A template or variable that cannot work; the message names it."""


def placeholders(template):
    """The variable names a template uses, in order; TemplateError for a bad hole."""
    names = []
    for hole in HOLE.finditer(template):
        name = hole.group(1).strip()
        if not NAME.match(name):
            raise TemplateError(f"template: {hole.group(0)!r} is not {{{{ name }}}} "
                                "(only variable names are substituted)")
        names.append(name)
    return names


def variable_links(body):
    """{variable name: Link} of a template body's linked variables; LinkError names a
    variable whose `$` value does not parse."""
    out = {}
    for name, value in (body.get("variables") or {}).items():
        if isinstance(value, str) and value.strip().startswith("$"):
            try:
                out[name] = links.parse_link(value.strip())
            except links.LinkError as e:
                raise TemplateError(f"variables.{name}: {e}") from None
    return out


def check(body):
    """Refuse what would never render: an undeclared or malformed placeholder, a bad link."""
    if body["kind"] != "template":
        return
    declared = body.get("variables") or {}
    for name in placeholders(body["template"]):
        if name not in declared:
            raise TemplateError(f"template: {{{{ {name} }}}} names no variable "
                                f"(declared: {', '.join(sorted(declared)) or 'none'})")
    for name in declared:
        if not NAME.match(name):
            raise TemplateError(f"variables.{name}: a variable name is letters, digits "
                                "and _ (at most 64, not starting with a digit)")
    variable_links(body)


def text(value):
    """How a value is written into a file."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def render(body, resolve):
    """The file content of a config body; raises links.Unavailable."""
    if body["kind"] == "text":
        return body["content"]
    linked = variable_links(body)
    values = {}
    for name, value in (body.get("variables") or {}).items():
        values[name] = text(resolve(linked[name]) if name in linked else value)
    return HOLE.sub(lambda m: values[m.group(1).strip()], body["template"])


def links_of(body):
    """Every link of a body (for validation and waiting reasons)."""
    return list(variable_links(body).values()) if body.get("kind") == "template" else []
