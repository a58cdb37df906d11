"""Patterns match whole strings (issue 25): `$` in Python's re also matches before a
trailing newline, so route values, header names, pool hosts, DBaaS passwords and config
paths passed with "...\n", and the agent wrote a file named `x\n`.

The fix is in the mechanism (appliance/api/patterns.py, used by the Validator), so the
test walks every pattern the application declares: each resource field (nested Object
schemas included) and every schema a Validator is made with (actions' and routes' bodies),
and checks that a value the pattern takes is refused once a newline follows it.
"""

import json

import pytest
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st

from appliance import config
from appliance.api import validation
from appliance.api.errors import BadRequest
from appliance.api.patterns import compiled, whole
from appliance.app import create_app


def _patterned(schema, found, where=()):
    """Every sub-schema of `schema` that carries a string `pattern` -> where it was
    (the keys leading to it)."""
    if isinstance(schema, dict):
        if isinstance(schema.get("pattern"), str):
            found.setdefault(json.dumps(schema, sort_keys=True), (schema, where))
        for key, value in schema.items():
            _patterned(value, found, (*where, key))
    elif isinstance(schema, list):
        for value in schema:
            _patterned(value, found, where)


def declared_patterns(tmp_path):
    settings_ = config.load(environ={}, overrides={"state_dir": str(tmp_path)})
    _, api = create_app(settings_)
    found = {}
    for path, resource in api.resources.items():
        for field in resource.fields:
            _patterned(field.input_schema(), found, (path, field.name))
            if not field.read_only:
                resource.field_validator(field.name)
    for made in list(validation.MADE):
        _patterned(made.schema, found, ("validator",))
    return list(found.values())


def accepted_value(schema):
    """A value the schema takes: drawn from its pattern (as a whole string), then kept
    only if the whole schema (lengths, format) takes it too."""
    validator = validation.Validator(schema)

    def takes(value):
        try:
            validator.check(value)
        except BadRequest:
            return False
        return True

    strategy = st.from_regex(compiled(schema["pattern"]), fullmatch=True)
    # the first value taken will do (the newline must be refused after any of them):
    # shrinking it to the smallest one cost two thirds of the test's time
    return find(strategy, takes, settings=settings(
        database=None, max_examples=2000, phases=[Phase.generate],
        suppress_health_check=list(HealthCheck)))


def refuses(schema, value):
    try:
        validation.Validator(schema).check(value)
    except BadRequest:
        return True
    return False


def test_every_declared_pattern_refuses_a_trailing_newline(tmp_path):
    found = declared_patterns(tmp_path)
    assert len(found) > 40, len(found)
    # patterns inside Object fields' schemas are among them (LB rules, DBaaS users, ...)
    assert sum("properties" in where for _, where in found) > 10
    accepted_with_newline = []
    for schema, where in found:
        value = accepted_value(schema)
        newline = value + "\n"
        # refused by the whole schema, and by its pattern alone (not by a length)
        if not refuses(schema, newline) or not refuses(
                {"type": "string", "pattern": schema["pattern"]}, newline):
            accepted_with_newline.append((".".join(map(str, where)), schema["pattern"], value))
    assert not accepted_with_newline, "\n".join(map(repr, accepted_with_newline))


@pytest.mark.parametrize("pattern, rewritten", [
    (r"^a$", r"^a\Z"),
    (r"^[$]x\$y$", r"^[$]x\$y\Z"),
    (r"^(?=.{1,253}$)a$|^b$", r"^(?=.{1,253}\Z)a\Z|^b\Z"),
    (r"^[]$]$", r"^[]$]\Z"),
    (r"^[^]$\]]*$", r"^[^]$\]]*\Z"),
    (r"^(/(?!\.\.?(/|$))[^/\x00]+)+$", r"^(/(?!\.\.?(/|\Z))[^/\x00]+)+\Z"),
])
def test_end_anchors_are_rewritten_and_nothing_else(pattern, rewritten):
    assert whole(pattern) == rewritten


def test_the_rewritten_anchor_refuses_only_the_trailing_newline():
    assert compiled(r"^[a-z]+$").search("abc")
    assert compiled(r"^[a-z]+$").search("abc\n") is None
    assert compiled(r"^(a|b$)").search("b\n") is None
    assert compiled(r"^[$]$").search("$")


def test_the_published_patterns_keep_dollar(tmp_path):
    """The OpenAPI document keeps `$`: in ECMA-262, JSON Schema's dialect, `$` already
    ends the string, and `\\Z` means a plain Z there."""
    assert all(r"\Z" not in s["pattern"] for s, _ in declared_patterns(tmp_path))
