"""Body validation with jsonschema (Draft 2020-12, the dialect of OpenAPI 3.1).

The schema a resource publishes is the schema its bodies are checked against, so the two
cannot drift. Messages name the field and the rule but never echo the value sent: a
rejected value may be a secret, and error messages end up in logs.

"integer" is strict here: JSON Schema counts 32.0 as an integer, but then a float would
reach the code behind the field (password lengths, key sizes) and fail there. A number
written with a fraction or an exponent is refused wherever an integer is expected.

"pattern" matches whole strings: `$` ends the string, a trailing newline included
(patterns.py).
"""

import weakref

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from .errors import BadRequest
from .patterns import compiled


def _is_integer(checker, instance):
    return isinstance(instance, int) and not isinstance(instance, bool)


def _whole_pattern(validator, pattern, instance, schema):
    """JSON Schema's `pattern` (a search, as the standard says), with `$` matching only at
    the very end: jsonschema runs Python's re, whose `$` also matches before a trailing
    newline, and "x\n" passed every `^...$` (patterns.py)."""
    if validator.is_type(instance, "string") and not compiled(pattern).search(instance):
        yield ValidationError(f"does not match the pattern {pattern}")


_STRICT = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={"pattern": _whole_pattern},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))

_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number",
               "boolean": "a boolean", "object": "an object", "array": "a list",
               "null": "null"}


def _type_phrase(expected):
    names = expected if isinstance(expected, list) else [expected]
    return " or ".join(_TYPE_NAMES.get(n, n) for n in names)


_FORMAT_PHRASES = {"uuid": "must be a UUID like 3f2b8c1e-5d4a-4c3b-9a7e-1f2e3d4c5b6a",
                   "ipv4": "must be an IPv4 address like 10.0.0.5",
                   "date-time": "must be an RFC 3339 date-time like 2026-01-31T12:00:00Z"}


def _pattern_phrase(schema):
    # Say what is expected: in words when the schema names a known format, else the
    # regular expression itself (a pattern is the schema's, never the value sent).
    if schema.get("format") in _FORMAT_PHRASES:
        return _FORMAT_PHRASES[schema["format"]]
    return f"must match the pattern {schema['pattern']}"


def describe(error):
    where = ".".join(str(p) for p in error.absolute_path)
    value = error.validator_value
    rule = error.validator
    if rule == "required":
        missing = [r for r in value if r not in (error.instance or {})]
        field = ".".join(filter(None, [where, missing[0] if missing else "?"]))
        return f"{field}: required"
    if rule == "additionalProperties":
        allowed = set((error.schema.get("properties") or {}))
        extra = sorted(set(error.instance) - allowed)
        return f"{where or 'body'}: unknown field(s) {', '.join(extra)}"
    messages = {
        "type": lambda: f"must be {_type_phrase(value)}",
        "maxLength": lambda: f"must be at most {value} characters long",
        "minLength": lambda: f"must be at least {value} characters long",
        "maximum": lambda: f"must be at most {value}",
        "minimum": lambda: f"must be at least {value}",
        "enum": lambda: "must be one of " + ", ".join(str(v) for v in value if v is not None),
        "const": lambda: f"must be {value}",
        "pattern": lambda: _pattern_phrase(error.schema),
        "format": lambda: _FORMAT_PHRASES.get(value, f"must be a valid {value}"),
        "maxItems": lambda: f"must have at most {value} items",
        "minItems": lambda: f"must have at least {value} items",
        "uniqueItems": lambda: "must not repeat items",
        "minProperties": lambda: f"must have at least {value} keys",
    }
    text = messages.get(rule, lambda: "is not valid")()
    return f"{where or 'body'}: {text}"


# Every Validator made, for tests/api/test_schemas.py: the schemas are the code's own
# constants, so checking them against the metaschema belongs in a test, not at every start
# (it was half of the API's start-up: ~5 s of a boot under TCG, docs/appliance-image.md)
MADE = weakref.WeakSet()


class Validator:
    def __init__(self, schema):
        self.schema = schema
        MADE.add(self)
        self._validator = _STRICT(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)

    def check(self, instance):
        error = best_match(self._validator.iter_errors(instance))
        if error is not None:
            raise BadRequest(describe(error))

    def check_at(self, instance, where):
        """As check, with the error's field path prefixed by `where`."""
        error = best_match(self._validator.iter_errors(instance))
        if error is not None:
            raise BadRequest(f"{where}.{describe(error)}")
