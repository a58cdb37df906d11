"""Pure helpers: path normalization, field parsing, column choice, config dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.cli import UsageError
from appliance.cli.client import api_path, normalize_endpoint
from appliance.cli.common import parse_fields
from appliance.cli.output import choose_columns, render_table
from appliance.cli.session import config_dir_from_environ


@pytest.mark.parametrize("raw", ["iam/users", "/iam/users", "v1/iam/users", "/v1/iam/users/", " iam//users/ "])
def test_api_path_collection(raw):
    assert api_path(raw, collection=True) == "/v1/iam/users/"
    assert api_path(raw, collection=False) == "/v1/iam/users"


@pytest.mark.parametrize("raw", ["", "/", "/v1/", "iam/../x", "iam/users?name=a", "https://host/v1/iam/users"])
def test_api_path_rejects(raw):
    with pytest.raises(UsageError):
        api_path(raw, collection=True)


def test_api_path_quotes_segments():
    assert api_path("dns/domains/a b", collection=False) == "/v1/dns/domains/a%20b"


def test_normalize_endpoint():
    assert normalize_endpoint("http://h:1/") == "http://h:1"
    assert normalize_endpoint("https://h/prefix/") == "https://h/prefix"
    with pytest.raises(UsageError):
        normalize_endpoint("h:1")


def test_parse_fields():
    assert parse_fields(["a=1", "b:=1", "c:=null", "d=x=y", "e=", 'f:={"k":[1]}', "g=a:=b"]) == {
        "a": "1", "b": 1, "c": None, "d": "x=y", "e": "", "f": {"k": [1]}, "g": "a:=b"}
    for bad in ["=x", ":=1", "novalue"]:
        with pytest.raises(UsageError):
            parse_fields([bad])


def test_choose_columns_puts_identity_first_and_skips_nested():
    rows = [{"created_at": "t", "extra": 1, "spec": {"a": 1}, "status": "NEW", "uuid": "u", "username": "n"}]
    assert choose_columns(rows) == ["uuid", "username", "status", "extra", "created_at"]


def test_render_table_of_scalars():
    assert render_table(["a", "b"]) == "a\nb"


def test_config_dir_precedence(tmp_path):
    home = Path("/home/someone")
    assert config_dir_from_environ({}, home) == home / ".config" / "appliance"
    assert config_dir_from_environ({"XDG_CONFIG_HOME": "/x"}, home) == Path("/x/appliance")
    assert config_dir_from_environ({"XDG_CONFIG_HOME": "/x", "APPLIANCE_CLI_CONFIG_DIR": "/c"}, home) == Path("/c")


def test_fields_may_follow_options_but_unknown_options_may_not(tmp_path):
    import io

    from appliance.cli.main import Environment, build_parser, parse_arguments, program

    env = Environment(stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(), config_dir=tmp_path,
                      environ={}, transport=None, getpass=input)
    parsed = parse_arguments(build_parser(env), ["create", "things", "a=1", "--json", "b:=2", "c=3"])
    assert parsed.fields == ["a=1", "b:=2", "c=3"]
    assert program(["create", "things", "a=1", "--bogus"], env) == 2
    assert "unrecognized arguments: --bogus" in env.stderr.getvalue()
    assert program(["list", "things", "extra=1"], env) == 2
