"""Every schema the API validates bodies with is a valid Draft 2020-12 schema.

The Validator no longer checks its schema against the metaschema when it is made (that was
half of the API's start-up: seconds of every boot under TCG, docs/appliance-image.md), so
this test does it for every validator the whole application makes, the lazily made
per-field ones included."""

import jsonschema
import pytest

from appliance import config
from appliance.api import validation
from appliance.app import create_app


def test_every_validator_schema_is_valid(tmp_path):
    settings = config.load(environ={}, overrides={"state_dir": str(tmp_path)})
    _, api = create_app(settings)
    for resource in api.resources.values():
        for field in resource.fields:
            if not field.read_only:
                resource.field_validator(field.name)
    schemas = [v.schema for v in list(validation.MADE)]
    assert len(schemas) > 50
    for schema in schemas:
        jsonschema.Draft202012Validator.check_schema(schema)


def test_a_broken_schema_is_caught_by_the_check():
    made = validation.Validator({"type": "no such type"})
    assert made in validation.MADE
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft202012Validator.check_schema(made.schema)
