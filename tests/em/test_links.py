"""The link grammar evaluated against a resolver (no store): functions and templates."""

import pytest

from appliance.em import links

VALUES = {"secret.secrets.$a": {"value": "s3", "nested": {"inner": "deep"}},
          "compute.sets.$s": {"ips": ["10.0.0.1", "10.0.0.2"], "uuid": "u-1"}}


def resolve(link):
    target = VALUES[link.key]
    if not link.fields:
        return target["uuid"]
    value = target
    for field in link.fields:
        value = value.get(field) if isinstance(value, dict) else None
    if value is None:
        raise links.Unavailable(link.text, link.fields[-1])
    return value


@pytest.mark.parametrize("text,expected", [
    ("$x.secret.secrets.$a:value", "s3"),
    ("$x.secret.secrets.$a:nested:inner", "deep"),
    ("$x.compute.sets.$s", "u-1"),
    ("to_str($x.compute.sets.$s:ips)", "10.0.0.1,10.0.0.2"),
    ("to_str($x.secret.secrets.$a:value)", "s3"),
    ("index($x.compute.sets.$s:ips, 1)", "10.0.0.2"),
    ("index($x.compute.sets.$s:ips, -1)", "10.0.0.2"),
    ('join($x.compute.sets.$s:ips, " ")', "10.0.0.1 10.0.0.2"),
    ('join($x.compute.sets.$s:ips, ",")', "10.0.0.1,10.0.0.2"),
    ('f"db={$x.secret.secrets.$a:value};hosts={to_str($x.compute.sets.$s:ips)}"',
     "db=s3;hosts=10.0.0.1,10.0.0.2"),
    ("f'{$x.compute.sets.$s:ips}'", "10.0.0.1,10.0.0.2"),
    ("plain text with $ inside", "plain text with $ inside"),
])
def test_evaluation(text, expected):
    assert links.render(text, resolve) == expected


def test_render_walks_nested_bodies():
    body = {"a": ["$x.secret.secrets.$a:value", {"b": "index($x.compute.sets.$s:ips, 0)"}],
            "n": 5, "t": True}
    assert links.render(body, resolve) == {"a": ["s3", {"b": "10.0.0.1"}], "n": 5, "t": True}


@pytest.mark.parametrize("text,reason", [
    ("$x.secret.secrets.$a:missing", "missing"),
    ("index($x.compute.sets.$s:ips, 5)", "index 5"),
    ("index($x.secret.secrets.$a:value, 0)", "not a list"),
])
def test_unavailable(text, reason):
    with pytest.raises(links.Unavailable) as err:
        links.render(text, resolve)
    assert err.value.reason == reason


def test_expressions_name_their_paths():
    body = {"a": {"b": ["x", "$e.secret.secrets.$s:value"]}}
    found = list(links.expressions(body))
    assert [(path, expr.text) for path, expr in found] == [
        (("a", "b", "1"), "$e.secret.secrets.$s:value")]


@pytest.mark.parametrize("text,element,segments,fields", [
    ("$passwords-example.secret.passwords.$auto_hex_password:value", "passwords-example",
     ("secret", "passwords", "$auto_hex_password"), ("value",)),
    ("$core-service-example.imports.$var-default-cores:value", "core-service-example",
     ("imports", "$var-default-cores"), ("value",)),
    ("$test-element-1.compute.nodes.$example_node", "test-element-1",
     ("compute", "nodes", "$example_node"), ()),
])
def test_hyphenated_element_names_parse_as_written(text, element, segments, fields):
    link = links.parse_link(text)
    assert (link.element, link.segments, link.fields) == (element, segments, fields)
    inner = links.parse_expression(f'f"x {{{text}}} y"')
    assert [found.text for found in inner.links()] == [text]
