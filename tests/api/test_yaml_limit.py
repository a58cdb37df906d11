"""A YAML body over max_yaml_bytes is refused with 413 before it is read or parsed
(issue 25: a 30 MiB scalar, under the 32 MiB manifest limit, took 52 s to refuse).
The parser is watched by wrapping the API's own parse_yaml in the server's process: a
spy, because "not parsed" cannot be seen from outside but by timing."""

import pytest

from appliance.api import yaml_bodies
from tests.conftest import ADMIN_PASSWORD

M = "/v1/em/manifests"


@pytest.fixture
def parsed(monkeypatch):
    calls = []
    real = yaml_bodies.parse_yaml

    def spy(text):
        calls.append(len(text))
        return real(text)

    monkeypatch.setattr(yaml_bodies, "parse_yaml", spy)
    return calls


def test_a_30_mib_yaml_scalar_is_413_unparsed(server, admin, parsed):
    body = b"name: x\nversion: 1.0.0\nresources: {}\ndescription: " + b"a" * (30 * 2 ** 20)
    assert len(body) < server.settings["max_upload_bytes"]     # under the manifest limit
    before = admin.get(M).json
    resp = admin.post(M, raw=body, content_type="application/yaml")
    assert resp.status == 413, resp
    assert resp.json["type"] == "PayloadTooLarge"
    assert str(server.settings["max_yaml_bytes"]) in resp.json["message"]
    assert "JSON" in resp.json["message"]
    assert parsed == []
    assert admin.get(M).json == before
    # the server goes on, and a small YAML body is parsed as before
    small = b"name: y\nversion: 1.0.0\nresources: {}\n"
    assert admin.post(M, raw=small, content_type="application/yaml").status == 201
    assert parsed == [len(small)]
    assert server.login("admin", ADMIN_PASSWORD)


def test_the_limit_is_on_yaml_only(server, admin, parsed):
    """The same size as JSON is still taken: JSON's parser is not the slow one."""
    limit = server.settings["max_yaml_bytes"]
    json_body = ('{"name": "big", "version": "1.0.0", "resources": {}, "description": "'
                 + "a" * (limit + 10) + '"}').encode()
    resp = admin.post(M, raw=json_body, content_type="application/json")
    assert resp.status != 413, resp
    yaml_body = b"name: big\nversion: 1.0.0\nresources: {}\n#" + b"#" * limit
    assert admin.post(M, raw=yaml_body, content_type="application/yaml").status == 413
    assert parsed == []
