"""No secret value and no password is ever in the audit trail.

Secrets, generated passwords, users with passwords, a password change, logins with the
right and a wrong password, and a value sent in a query string (where no route takes one,
but a client may put it): every value is then looked for in the raw segment files and in
what GET /v1/audit/ answers. The values join tests.conftest.SECRET_VALUES, so the run's
log check greps the logs for them too.
"""

import uuid

from appliance.iam.builtin import ADMIN_PROJECT
from tests.audit.conftest import entries, trail_bytes, trail_files
from tests.conftest import ADMIN_PASSWORD, SECRET_VALUES
from tests.iam.helpers import bind, make_project, make_user


def remember(value):
    SECRET_VALUES.add(value)
    return value


def test_no_secret_value_or_password_is_in_the_trail(server, admin):
    values = {ADMIN_PASSWORD}
    project = make_project(admin)
    secret_value = remember(f"audit-secret-{uuid.uuid4().hex}")
    values.add(secret_value)
    secret = admin.post("/v1/secret/secrets/", {"name": "audit-s", "project_id": project,
                                                "value": secret_value})
    assert secret.status == 201, secret
    changed = remember(f"audit-secret-changed-{uuid.uuid4().hex}")
    values.add(changed)
    assert admin.put(f"/v1/secret/secrets/{secret.json['uuid']}",
                     {"value": changed}).status == 200
    generated = admin.post("/v1/secret/passwords/", {"name": "audit-p",
                                                     "project_id": ADMIN_PROJECT})
    assert generated.status == 201, generated
    values.add(remember(generated.json["value"]))
    # in a query string: no route reads it, and the trail keeps the path only
    in_query = remember(f"audit-query-{uuid.uuid4().hex}")
    values.add(in_query)
    assert admin.post("/v1/secret/secrets/", {"name": "audit-q", "project_id": project,
                                              "value": "x" * 8},
                      query={"value": in_query}).status in (201, 400)
    password = remember(f"audit-user-password-{uuid.uuid4().hex}")
    values.add(password)
    user, username, _ = make_user(admin, password=password)
    bind(admin, user, "owner", project)
    new_password = remember(f"audit-new-password-{uuid.uuid4().hex}")
    values.add(new_password)
    assert admin.put(f"/v1/iam/users/{user}", {"password": new_password}).status == 200
    wrong = remember(f"audit-wrong-password-{uuid.uuid4().hex}")
    values.add(wrong)
    assert server.token_response(username, wrong).status == 400
    assert server.token_response(username, new_password,
                                 scope=f"project:{project}").status == 200
    refresh = server.token_response(username, new_password).json["refresh_token"]
    token = server.client().post("/v1/iam/clients/default/actions/get_token/invoke",
                                 {"grant_type": "refresh_token", "refresh_token": refresh})
    assert token.status == 200, token
    values.update({refresh, token.json["access_token"], token.json["refresh_token"]})

    listed = admin.get("/v1/audit/").raw      # also flushes the queue to the files
    raw = trail_bytes(server.settings["state_dir"])
    assert trail_files(server.settings["state_dir"]) and raw.count(b"\n") >= 8
    assert username.encode() in raw           # the grep does find what is there
    for value in values | SECRET_VALUES:
        assert value.encode() not in raw, "a secret value is in the audit trail files"
        assert value.encode() not in listed, "a secret value is in GET /v1/audit/"
    logins = [e["login"] for e in entries(admin, actor=username) if "login" in e]
    assert {"username": username, "succeeded": False} in logins
    assert {"username": username, "succeeded": True} in logins
    assert all(set(login) == {"username", "succeeded"} for login in logins)


# identifiers, never values: a route that takes another path parameter must be checked
# for secrets first (docs/security.md, "The audit trail holds no bodies")
# (`path`: a file of the web console's front end, GET only, docs/console.md)
IDENTIFIERS = {"uuid", "client", "domain", "lb", "vhost", "instance", "element", "path"}


def test_no_path_parameter_can_carry_a_secret(admin):
    document = admin.get("/v1/openapi.json").json
    names = {p["name"] for operations in document["paths"].values()
             for operation in operations.values()
             for p in operation.get("parameters", []) if p["in"] == "path"}
    assert names and names <= IDENTIFIERS, names - IDENTIFIERS
