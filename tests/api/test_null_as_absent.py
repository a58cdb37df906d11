"""A null where a field has no use for null means "not given" (docs/validation.md,
"null"): walks every declared field of every resource, and the rule's edges."""

from appliance import config
from appliance.api.fields import Object, accepts_null, nulls_as_absent
from appliance.app import create_app


def _api(tmp_path):
    settings = config.load(environ={}, overrides={"state_dir": str(tmp_path)})
    return create_app(settings)[1]


def test_every_defaulted_non_nullable_field_reads_null_as_not_given(tmp_path):
    """On create a field left out gets its default (Resource.create_record), so dropping
    the null is what gives it the default; on update, not given leaves it as it is."""
    walked = 0
    for resource in _api(tmp_path).resources.values():
        for field in resource.fields:
            if field.hidden or field.read_only or field.required or field.nullable:
                continue
            walked += 1
            assert resource._normalize({field.name: None}) == {}, (resource.name, field.name)
    assert walked > 20


def test_nullable_fields_keep_their_null(tmp_path):
    """A secret's `value: null` falls back to default_value (spec 2.2 rule 3)."""
    api = _api(tmp_path)
    secrets = api.resources["/v1/secret/secrets"]
    assert secrets.field("value").nullable
    assert secrets._normalize({"value": None}) == {"value": None}


def test_kind_object_properties():
    schema = {"type": "object", "required": ["must"], "properties": {
        "must": {"type": "string"},
        "kind": {"const": "k"},
        "plain": {"type": "string"},
        "with_default": {"type": "integer", "default": 3},
        "nullable": {"type": ["string", "null"]},
        "anything": {},
        "nested": {"type": "object", "properties": {"inner": {"enum": ["a"]}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "x": {"type": "boolean"}}}}}}
    given = {"kind": "k", "must": None, "plain": None, "with_default": None, "nullable": None,
             "anything": None, "unknown": None, "nested": {"inner": None},
             "items": [{"x": None}, {"x": True}]}
    assert nulls_as_absent(schema, given) == {
        "kind": "k", "must": None, "with_default": 3, "nullable": None, "anything": None,
        "unknown": None, "nested": {}, "items": [{}, {"x": True}]}
    assert not accepts_null({"enum": ["a"]}) and accepts_null({"enum": ["a", None]})
    assert accepts_null({"anyOf": [{"type": "string"}, {"type": "null"}]})


def test_kinds_pick_the_branch_of_their_kind():
    a = {"type": "object", "properties": {"kind": {"const": "a"}, "v": {"type": "string"}}}
    b = {"type": "object", "properties": {"kind": {"const": "b"},
                                          "v": {"type": ["string", "null"]}}}
    one_of = {"oneOf": [a, b]}
    assert nulls_as_absent(one_of, {"kind": "a", "v": None}) == {"kind": "a"}
    assert nulls_as_absent(one_of, {"kind": "b", "v": None}) == {"kind": "b", "v": None}
    field = Object({"type": "object"}, kinds={"a": a, "b": b})
    assert field.to_input({"kind": "a", "v": None}) == {"kind": "a"}
    assert field.to_input({"kind": "b", "v": None}) == {"kind": "b", "v": None}
    # the unknown kind: nothing touched, validation says what is wrong
    assert field.to_input({"kind": "c", "v": None}) == {"kind": "c", "v": None}
