"""Hostile input against a real server: each answers a 4xx with the JSON error body, leaves
nothing behind, and the server goes on answering."""

import re
import socket
import uuid

import pytest

from appliance.api import bodies
from appliance.api.server_errors import body_limit
from appliance.iam.builtin import ADMIN_PROJECT
from tests.apiserver import TOKEN_PATH, ApiServer
from tests.conftest import ADMIN_PASSWORD

DEEP = 1000


def assert_error(resp, status, *words):
    assert resp.status == status, resp
    assert resp.header("content-type").startswith("application/json"), resp.headers
    assert set(resp.json) == {"type", "code", "message"} and resp.json["code"] == status
    for word in words:
        assert word in resp.json["message"], resp.json


def exchange(server, data, chunks=()):
    """Raw bytes in, (status, headers, body) out: for what http.client refuses to send."""
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(data)
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass        # the server answered and closed before the rest was sent
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def assert_raw_error(answer, status, *words):
    import json
    code, headers, body = answer
    assert code == status, answer
    assert headers["content-type"] == "application/json", headers
    error = json.loads(body)
    assert set(error) == {"type", "code", "message"} and error["code"] == status
    for word in words:
        assert word in error["message"], error
    return headers


def request_bytes(method, path, *headers, body=b""):
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: localhost", b"Connection: close",
             *headers]
    if body:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def still_serving(server):
    assert server.client().get("/v1/health").status == 200


# ---- integers -----------------------------------------------------------------------

@pytest.mark.parametrize("path,field,extra", [
    ("/v1/secret/passwords", "default_length", {}),
    ("/v1/secret/rsa_keys", "bits", {}),
    ("/v1/secret/ssh_keys", "bits", {"algorithm": "rsa"}),
])
@pytest.mark.parametrize("value", [2048.0, 2048.5, 2e3, "2048", True])
def test_a_non_integer_where_an_integer_is_expected_is_400(admin, path, field, extra, value):
    name = f"int-{uuid.uuid4().hex[:8]}"
    resp = admin.post(path, {"name": name, "project_id": ADMIN_PROJECT, field: value, **extra})
    assert_error(resp, 400, f"{field}: must be an integer")
    assert admin.get(path, query={"name": name}).json == []


def test_an_integral_value_is_stored_as_an_integer(admin):
    resp = admin.post("/v1/secret/passwords", {"name": f"int-{uuid.uuid4().hex[:8]}",
                                               "project_id": ADMIN_PROJECT,
                                               "default_length": 40})
    assert resp.status == 201, resp
    assert resp.json["default_length"] == 40 and len(resp.json["value"]) == 40
    update = admin.put(f"/v1/secret/passwords/{resp.json['uuid']}", {"default_length": 41.0})
    assert_error(update, 400, "default_length: must be an integer")


# ---- deep JSON ----------------------------------------------------------------------

def deep_json(levels):
    return b'{"a": ' * levels + b"1" + b"}" * levels


def test_json_nested_deeper_than_the_bound_is_400_on_every_body_route(server, admin):
    """Every route that reads a body, with its path parameters filled by a random uuid:
    the body is read (and refused) before any handler runs."""
    routes = [r for r in server.api.routes if r.method in ("POST", "PUT")]
    assert len(routes) > 20
    for route in routes:
        path = re.sub(r"<[^>]+>", str(uuid.uuid4()), route.path)
        client = server.client() if route.public else admin
        for levels in (bodies.MAX_DEPTH + 1, DEEP, 100_000):
            resp = client.post(path, raw=deep_json(levels), content_type="application/json") \
                if route.method == "POST" else \
                client.put(path, raw=deep_json(levels), content_type="application/json")
            assert resp.status == 400, (route, levels, resp)
            assert "nested more than" in resp.raw.decode(), (route, resp)
    still_serving(server)


def test_json_at_the_depth_bound_is_read(admin):
    """A body exactly MAX_DEPTH levels deep parses (and then meets the schema's rules)."""
    nested = {"kind": "plain"}
    for _ in range(bodies.MAX_DEPTH - 3):     # body > constructor > ... > leaf
        nested = {"x": nested}
    resp = admin.post("/v1/secret/secrets", {"name": "deep", "project_id": ADMIN_PROJECT,
                                             "constructor": nested})
    assert resp.status == 400 and "nested" not in resp.json["message"], resp


def test_the_token_endpoint_refuses_deep_json_and_odd_forms(server):
    client = server.client()
    for levels in (DEEP, 50_000):
        assert_error(client.post(TOKEN_PATH, raw=b"[" * levels + b"]" * levels,
                                 content_type="application/json"), 400, "nested")
    # a form has no nesting: brackets are only characters of a value
    resp = client.post(TOKEN_PATH, raw=b"grant_type=password&username=" + b"%5B" * 50_000 +
                       b"&password=x", content_type="application/x-www-form-urlencoded")
    assert resp.status == 400 and resp.json["error"] == "invalid_grant", resp
    still_serving(server)


def test_json_that_the_store_could_not_hold_is_400(admin):
    for raw in (b'{"name": "\\ud800"}', b'{"name": NaN}', b'{"a": 1e999}'):
        assert_error(admin.post("/v1/secret/secrets", raw=raw,
                                content_type="application/json"), 400, "not valid JSON")


# ---- headers ------------------------------------------------------------------------

def test_authorization_that_is_not_utf8_is_401(server):
    for value in (b"Bearer \xff\xfe", b"Bearer \xc3\x28", "Bearer é".encode("utf-8"),
                  b"\xff"):
        headers = assert_raw_error(exchange(server, request_bytes(
            "GET", "/v1/iam/users", b"Authorization: " + value)), 401, "Authorization")
        assert headers["www-authenticate"].startswith("Bearer")
    still_serving(server)


def test_authorization_with_control_characters_is_401_other_headers_400(server):
    for value in (b"Bearer a\x01b", b"Bearer \x7f", b"Bearer a\x00"):
        assert_raw_error(exchange(server, request_bytes(
            "GET", "/v1/iam/users", b"Authorization: " + value)), 401, "Authorization")
        assert_raw_error(exchange(server, request_bytes(
            "GET", "/v1/iam/users", b"X-Trace: " + value)), 400, "Invalid header")
    # the public token endpoint too, where no token is needed at all
    assert_raw_error(exchange(server, request_bytes(
        "POST", TOKEN_PATH, b"Authorization: Basic \x01",
        b"Content-Type: application/json", body=b"{}")), 401)
    still_serving(server)


def test_other_malformed_requests_get_the_json_error_body(server):
    assert_raw_error(exchange(server, request_bytes(
        "POST", TOKEN_PATH, b"Content-Length: 12x")), 400, "Content-Length")
    assert_raw_error(exchange(server, b"GET /v1/health HTTP/1.1\r\n\x01\r\n\r\n"), 400)


# ---- the body limit of the server core ----------------------------------------------

@pytest.fixture(scope="module")
def small_limits(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    max_body_bytes=16 * 1024, max_upload_bytes=64 * 1024).start()
    srv.admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    yield srv
    srv.stop()


def test_a_body_over_the_server_limit_is_413_json(small_limits):
    token = small_limits.admin.token.encode()
    # announced: refused from the headers alone, nothing is read
    assert_raw_error(exchange(small_limits, request_bytes(
        "POST", "/v1/em/manifests", b"Authorization: Bearer " + token,
        b"Content-Type: application/yaml", b"Content-Length: 1000000000")),
        413, str(64 * 1024))
    # chunked: refused once the chunks pass the limit. What is sent ends on the very byte
    # that passes it, so the server has read all it was sent when it answers and closes
    # (unread bytes would make its close a reset that can eat the answer).
    limit = body_limit(small_limits.settings)
    full = b"2000\r\n" + b"a" * 0x2000 + b"\r\n"
    count = limit // len(full)
    tail = b"2000\r\n" + b"a" * (limit - count * len(full) - len(b"2000\r\n"))
    assert_raw_error(exchange(small_limits, request_bytes(
        "POST", "/v1/em/manifests", b"Authorization: Bearer " + token,
        b"Content-Type: application/yaml", b"Transfer-Encoding: chunked"),
        chunks=[full] * count + [tail]), 413, str(64 * 1024))
    assert small_limits.admin.get("/v1/em/manifests").json == []
    still_serving(small_limits)


def test_a_body_just_over_the_route_limit_is_read_and_refused_by_the_route(small_limits):
    """Under the core's backstop the route decides, on a body read whole, so a client
    that sends its whole body before it reads the answer still gets the 413."""
    limit = small_limits.settings["max_upload_bytes"]
    body = b"name: x\nversion: 1.0.0\nresources: {}\n#"
    resp = small_limits.admin.post("/v1/em/manifests", raw=body.ljust(limit, b"#"),
                                   content_type="application/yaml")
    assert resp.status == 201, resp
    resp = small_limits.admin.post("/v1/em/manifests", raw=body.ljust(limit + 1, b"#"),
                                   content_type="application/yaml")
    assert_error(resp, 413, str(limit))


# ---- YAML ---------------------------------------------------------------------------

def post_yaml(admin, text):
    return admin.post("/v1/em/manifests", raw=text.encode(), content_type="application/yaml")


def test_yaml_nested_50000_deep_is_400(server, admin):
    for text in ("name: x\nresources: " + "[" * 50_000 + "]" * 50_000,
                 "name: x\nresources: " + "{a: " * 50_000 + "}" * 50_000,
                 "- " * 50_000 + "x",
                 # 300 levels by indentation (90 KB: under max_yaml_bytes, which a
                 # deeper one would pass first, refused with 413 unread)
                 "".join(" " * i + "a:\n" for i in range(0, 600, 2))):
        assert_error(post_yaml(admin, text), 400, "nested more than")
    assert admin.get("/v1/em/manifests").json == []
    still_serving(server)


def alias_bomb(levels):
    lines = ["name: bomb", "version: '1'", "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    lines.append(f"resources: {{x: {{y: *l{levels}}}}}")
    return "\n".join(lines)


def test_yaml_alias_bombs_are_400_and_the_server_goes_on(server, admin):
    """9 levels of 10 aliases stand for 8 billion nodes in under 2 KB: refused once the
    aliases stand for more than the budget, before anything expands them."""
    bomb = alias_bomb(9)
    assert len(bomb) < 2048
    for _ in range(3):
        assert_error(post_yaml(admin, bomb), 400, "aliases stand for more than")
    assert_error(post_yaml(admin, "name: x\nversion: '1'\nresources: &r {a: *r}"), 400,
                 "contains it")
    assert admin.get("/v1/em/manifests").json == []
    still_serving(server)


def test_yaml_with_a_few_aliases_is_accepted(admin):
    text = """
name: anchors
version: "1.0.0"
resources:
  $core.secret.secrets:
    a: &secret {name: anchored-a, project_id: %s, constructor: {kind: plain}}
    b: {<<: *secret, name: anchored-b}
""" % ADMIN_PROJECT
    resp = post_yaml(admin, text)
    assert resp.status == 201, resp
    secrets = resp.json["resources"]["$core.secret.secrets"]
    assert secrets["b"] == {**secrets["a"], "name": "anchored-b"}


def test_yaml_values_without_a_json_form_are_400(admin):
    for value in ("!!binary aGVsbG8=", "!!set {a, b}", "123456789012345678901234567890",
                  '"\\ud800"'):
        assert_error(post_yaml(admin, f"name: x\nversion: '1'\nresources: {{}}\nx: {value}"),
                     400, "JSON")


# ---- the token endpoint's error bodies, as documented -------------------------------

def test_openapi_describes_the_token_endpoints_oauth_errors(server):
    import jsonschema
    document = server.client().get("/v1/openapi.json").json
    responses = document["paths"]["/v1/iam/clients/{client}/actions/get_token/invoke"][
        "post"]["responses"]

    def check(resp, body_keys):
        assert set(resp.json) == body_keys, resp
        schema = {**responses[str(resp.status)]["content"]["application/json"]["schema"],
                  "components": document["components"]}
        jsonschema.validate(resp.json, schema)

    client = server.client()
    oauth = {"error", "error_description"}
    check(server.token_response("admin", "wrong password"), oauth)
    check(client.post(TOKEN_PATH, {"grant_type": "magic"}), oauth)
    check(client.post("/v1/iam/clients/%s/actions/get_token/invoke" % uuid.uuid4(),
                      {"grant_type": "password"}), oauth)
    check(client.post(TOKEN_PATH, raw=b"{", content_type="application/json"),
          {"type", "code", "message"})
    assert responses["400"]["content"]["application/json"]["schema"]["anyOf"][0] == {
        "$ref": "#/components/schemas/OAuthError"}
    assert document["components"]["schemas"]["OAuthError"]["required"] == ["error"]
