"""Statuses the API answers are in the OpenAPI document (issue 25): the 403 of the
project filter on every list of a project-scoped kind (the public store catalog
included, which declared none), and the 401 of `/v1/ua/enroll` (public: the enrollment
token in its body is the authentication)."""

import uuid

from appliance.iam.builtin import ADMIN_PROJECT


def operation(document, path, method):
    return document["paths"][path][method]


def test_every_project_scoped_list_declares_the_filters_403(server):
    document = server.client().get("/v1/openapi.json").json
    scoped = [path for path, resource in server.api.resources.items()
              if resource.project_scoped and "list" in resource.operations]
    assert "/v1/repo/store/elements" in scoped and len(scoped) > 10
    for path in scoped:
        openapi_path = path.replace("<", "{").replace(">", "}")
        responses = operation(document, openapi_path, "get")["responses"]
        assert "403" in responses, path
        assert responses["403"]["content"]["application/json"]["schema"]["$ref"] == \
            "#/components/schemas/Error"


def test_the_store_catalogs_403_is_real_and_documented(server):
    resp = server.client().get("/v1/repo/store/elements",
                               query={"project_id": str(uuid.uuid4())})
    assert resp.status == 403, resp
    assert resp.json["type"] == "Forbidden" and "filtering by project" in resp.json["message"]
    # its own project is fine
    assert server.client().get("/v1/repo/store/elements",
                               query={"project_id": ADMIN_PROJECT}).status == 200
    document = server.client().get("/v1/openapi.json").json
    responses = operation(document, "/v1/repo/store/elements", "get")["responses"]
    assert "project_id" in responses["403"]["description"]


def test_enrolls_401_is_real_and_documented(server):
    resp = server.client().post("/v1/ua/enroll", {"token": "not-an-enrollment-token"})
    assert resp.status == 401, resp
    assert resp.json["type"] == "Unauthorized"
    document = server.client().get("/v1/openapi.json").json
    responses = operation(document, "/v1/ua/enroll", "post")["responses"]
    assert "401" in responses
    assert responses["401"]["content"]["application/json"]["schema"]["$ref"] == \
        "#/components/schemas/Error"
