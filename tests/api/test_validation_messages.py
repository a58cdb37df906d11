"""Validation messages say what form is expected, without echoing the value sent."""

import pytest

from appliance.api.errors import BadRequest
from appliance.api.fields import UUID, Reference, String
from appliance.api.validation import Validator


def message(schema, value):
    with pytest.raises(BadRequest) as refused:
        Validator({"type": "object", "properties": {"field": schema}}).check({"field": value})
    text = refused.value.message
    assert value not in text
    assert "invalid format" not in text
    return text


def test_a_uuid_is_described_with_an_example():
    assert message(UUID().schema(), "default") == \
        "field: must be a UUID like 3f2b8c1e-5d4a-4c3b-9a7e-1f2e3d4c5b6a"


def test_a_pattern_is_named():
    assert message(String(pattern=r"^[a-z]+$").schema(), "ABC") == "field: must match the pattern ^[a-z]+$"
    assert message(Reference("/v1/dns/domains").schema(), "zone") == \
        r"field: must match the pattern ^(/v1/dns/domains/)?[0-9a-fA-F-]{36}$"


def test_a_known_format_is_described():
    assert message({"type": "string", "format": "ipv4"}, "10.1.2.300") == \
        "field: must be an IPv4 address like 10.0.0.5"
