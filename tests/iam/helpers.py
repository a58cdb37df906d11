import uuid

from appliance.iam.builtin import ADMIN_PROJECT


def role_uuid(admin, name):
    return admin.get("/v1/iam/roles", query={"name": name}).json[0]["uuid"]


def make_user(admin, username=None, password="a-good-password"):
    username = username or f"u{uuid.uuid4().hex[:10]}"
    resp = admin.post("/v1/iam/users", {"username": username, "password": password})
    assert resp.status == 201, resp
    return resp.json["uuid"], username, password


def make_project(admin, name=None):
    resp = admin.post("/v1/iam/projects", {"name": name or f"p{uuid.uuid4().hex[:10]}"})
    assert resp.status == 201, resp
    return resp.json["uuid"]


def bind(admin, user, role_name, project=None):
    body = {"user": user, "role": role_uuid(admin, role_name)}
    if project is not None:
        body["project"] = project
    resp = admin.post("/v1/iam/role_bindings", body)
    assert resp.status == 201, resp
    return resp.json["uuid"]


__all__ = ["ADMIN_PROJECT", "bind", "make_project", "make_user", "role_uuid"]
