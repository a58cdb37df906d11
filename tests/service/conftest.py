import uuid

import pytest

from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user

SVC = "/v1/em/services"
NODES = "/v1/compute/nodes"


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def refused(resp, status):
    """A clean 4xx: the status and the JSON error body."""
    assert resp.status == status, resp
    body = resp.json
    assert set(body) == {"type", "code", "message"} and body["code"] == status, body
    return body["message"]


def hw_node(admin, project=ADMIN_PROJECT):
    return created(admin.post(NODES, {"name": f"hw-{uuid.uuid4().hex[:8]}", "cores": 1,
                                      "ram": 1024, "node_type": "HW",
                                      "project_id": project}))


def service_body(node, **fields):
    return {"name": f"s{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT,
            "path": "sleep infinity", "target": {"kind": "node", "node": node},
            "service_type": {"kind": "simple"}, **fields}


class Member:
    """A user bound to `role` in a project of its own, with a token scoped to it."""

    def __init__(self, server, admin, role="owner"):
        self.project = make_project(admin)
        user, name, password = make_user(admin)
        bind(admin, user, role, self.project)
        self.client = server.client(server.login(name, password,
                                                 scope=f"project:{self.project}"))


@pytest.fixture(scope="module")
def node(admin):
    return hw_node(admin)["uuid"]


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
