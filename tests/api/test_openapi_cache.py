"""The OpenAPI document is built once and carries an ETag: a repeat read is a 304."""

import json

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD


def test_the_document_is_a_304_when_the_client_has_it(tmp_path):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD).start()
    try:
        client = srv.client()
        first = client.get("/v1/openapi.json")
        assert first.status == 200 and first.headers["content-type"] == "application/json"
        assert json.loads(first.raw)["openapi"].startswith("3.1")
        tag = first.headers["etag"]
        assert first.headers["cache-control"] == "no-cache"
        again = client.get("/v1/openapi.json", headers={"If-None-Match": tag})
        assert again.status == 304 and again.raw == b"" and again.headers["etag"] == tag
        # several tags, one of them ours; and a stale tag gets the whole document
        listed = client.get("/v1/openapi.json", headers={"If-None-Match": f'"x", {tag}'})
        assert listed.status == 304
        weak = client.get("/v1/openapi.json", headers={"If-None-Match": f"W/{tag}"})
        assert weak.status == 304
        stale = client.get("/v1/openapi.json", headers={"If-None-Match": '"stale"'})
        assert stale.status == 200 and stale.raw == first.raw
    finally:
        srv.stop()
