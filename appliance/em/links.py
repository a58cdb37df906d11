"""The link grammar of manifests, parsed once and evaluated against live resources.

    $<element>.<service>.<collection>.$<name>        a resource (its uuid when used bare)
    $<element>.<service>.<collection>.$<uuid>        a resource named by its uuid (configs)
    $<element>.<service>.<collection>.$<name>:field  a field of it; nested: :a:b
    $<element>.imports.$<import>:field               a field of an imported resource
    to_str(LINK)  index(LINK, i)  join(LINK, "sep")  functions over a value
    f"text {LINK} text"                              a template

An element name may hold `-` (`$passwords-example.imports.$x`): it is a name character
here, as in resource and import names, never an operator, so a name is written as it is.

A string value that starts with `$` is a link and must parse as one; `to_str(`, `index(`,
`join(` and `f"`/`f'` open the other forms. Anything else is a literal.
"""

import re

from appliance.kinds import UUID

IDENT = r"[A-Za-z_][A-Za-z0-9_-]*"
# a `$` segment may also be a uuid (one starting with a digit is no IDENT): a config names
# the record it links to by uuid, having no manifest names (docs/configs.md)
_LINK = re.compile(rf"^\$({IDENT})((?:\.(?:\$?{IDENT}|\${UUID}))+)((?::{IDENT})*)\Z")
_CALL = re.compile(r"^(to_str|index|join)\((.*)\)\Z", re.S)
_TEMPLATE = re.compile(r"^f(\"|')(.*)\1\Z", re.S)
_HOLE = re.compile(r"\{([^{}]*)\}")


class LinkError(ValueError):
    """A link that does not parse; the message names it."""


class Unavailable(Exception):
    """A link whose target cannot give the value yet (a secret with no value)."""

    def __init__(self, link, reason):
        super().__init__(f"{link} unavailable by reason {reason}")
        self.link = link
        self.reason = reason


class Link:
    def __init__(self, text, element, segments, fields):
        self.text = text
        self.element = element
        self.segments = tuple(segments)     # ("secret", "secrets", "$db")
        self.fields = tuple(fields)         # ("value",)

    @property
    def is_import(self):
        return self.segments[0] == "imports"

    @property
    def key(self):
        """The resource key inside a manifest: "secret.secrets.$db" or "imports.$x"."""
        return ".".join(self.segments)

    def links(self):
        yield self

    def evaluate(self, resolve):
        return resolve(self)

    def __repr__(self):
        return f"Link({self.text})"


class Call:
    def __init__(self, text, function, link, argument):
        self.text, self.function, self.link, self.argument = text, function, link, argument

    def links(self):
        yield self.link

    def evaluate(self, resolve):
        value = self.link.evaluate(resolve)
        if self.function == "to_str":
            return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
        if self.function == "index":
            if not isinstance(value, list):
                raise Unavailable(self.link.text, "not a list")
            if not -len(value) <= self.argument < len(value):
                raise Unavailable(self.link.text, f"index {self.argument}")
            return value[self.argument]
        items = value if isinstance(value, list) else [value]
        return self.argument.join(str(v) for v in items)


class Template:
    def __init__(self, text, parts):
        self.text, self.parts = text, parts    # str or expression

    def links(self):
        for part in self.parts:
            if not isinstance(part, str):
                yield from part.links()

    def evaluate(self, resolve):
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                value = part.evaluate(resolve)
                out.append(",".join(map(str, value)) if isinstance(value, list) else str(value))
        return "".join(out)


def parse_link(text):
    m = _LINK.match(text.strip())
    if not m:
        raise LinkError(f"{text!r} is not a link ($element.service.collection.$name[:field])")
    element, path, fields = m.groups()
    segments = path[1:].split(".")
    named = [s for s in segments if s.startswith("$")]
    if not named or not segments[-1].startswith("$"):
        raise LinkError(f"{text!r} must end with a $name segment before any :field")
    if segments[0] == "imports" and len(segments) != 2:
        raise LinkError(f"{text!r}: an import link is $element.imports.$name[:field]")
    if segments[0] != "imports" and (len(segments) < 3 or segments[0].startswith("$")):
        raise LinkError(f"{text!r}: expected $element.service.collection.$name")
    return Link(text, element, segments, [f for f in fields.split(":") if f])


def _unquote(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def parse_expression(text):
    """A link, call or template, or None for a literal string."""
    stripped = text.strip()
    if stripped.startswith("$"):
        return parse_link(stripped)
    m = _CALL.match(stripped)
    if m:
        function, inner = m.groups()
        first, _, rest = inner.partition(",")
        link = parse_link(first.strip())
        if function == "to_str":
            if rest.strip():
                raise LinkError(f"{text!r}: to_str takes one link")
            return Call(text, function, link, None)
        if not rest.strip():
            raise LinkError(f"{text!r}: {function} takes a link and an argument")
        if function == "index":
            try:
                return Call(text, function, link, int(rest.strip()))
            except ValueError:
                raise LinkError(f"{text!r}: the index must be an integer") from None
        return Call(text, function, link, _unquote(rest))
    m = _TEMPLATE.match(stripped)
    if m:
        body = m.group(2)
        parts, last = [], 0
        for hole in _HOLE.finditer(body):
            parts.append(body[last:hole.start()])
            inner = parse_expression(hole.group(1))
            if inner is None:
                raise LinkError(f"{text!r}: {{{hole.group(1)}}} is not a link or function")
            parts.append(inner)
            last = hole.end()
        parts.append(body[last:])
        return Template(text, [p for p in parts if p != ""])
    return None


def expressions(value, path=()):
    """Every (key path, expression) inside a resource body."""
    if isinstance(value, str):
        expr = parse_expression(value)
        if expr is not None:
            yield path, expr
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from expressions(v, path + (str(k),))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from expressions(v, path + (str(i),))


def render(value, resolve):
    """The body with every expression evaluated (raises Unavailable)."""
    if isinstance(value, str):
        expr = parse_expression(value)
        return value if expr is None else expr.evaluate(resolve)
    if isinstance(value, dict):
        return {k: render(v, resolve) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, resolve) for v in value]
    return value
