"""What first boot's nginx site compresses (appliance/firstboot/nginx.py): the console's
files and the public OpenAPI document, which every console load reads; not the API's
other answers, where a secret may sit beside input a caller chose."""

import gzip
import http.client
import json

from tests.firstboot.test_longlived_nginx import front  # noqa: F401 (the fixture)
from tests.firstboot.test_nginx_flood import https_login, tls_context


def get(port, path, token=None):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls_context(), timeout=30)
    headers = {"Accept-Encoding": "gzip"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_the_console_and_the_openapi_document_are_compressed_the_api_is_not(front):  # noqa: F811
    port, _ = front
    status, headers, body = get(port, "/v1/openapi.json")
    assert status == 200 and headers.get("content-encoding") == "gzip"
    document = json.loads(gzip.decompress(body))
    assert document["openapi"].startswith("3.1")
    assert len(body) * 4 < len(json.dumps(document))
    status, headers, body = get(port, "/console/js/main.js")
    assert status == 200 and headers.get("content-encoding") == "gzip"
    assert b"import" in gzip.decompress(body)
    token = https_login(port)
    status, headers, body = get(port, "/v1/iam/users/", token)
    assert status == 200 and "content-encoding" not in headers
    assert json.loads(body)[0]["username"] == "admin"
