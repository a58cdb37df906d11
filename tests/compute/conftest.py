import uuid

import pytest

from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user

IMAGE = "https://images.example.test/base.qcow2"
N, S, V = "/v1/compute/nodes", "/v1/compute/sets", "/v1/compute/volumes"
H, P = "/v1/compute/hypervisors", "/v1/compute/placement_policies"


def node_body(**fields):
    return {"name": f"n-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT, "cores": 1,
            "ram": 1024, "disk_spec": {"kind": "root_disk", "image": IMAGE}, **fields}


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def refused(resp, status):
    """A clean 4xx: the status and the JSON error body."""
    assert resp.status == status, resp
    body = resp.json
    assert set(body) == {"type", "code", "message"} and body["code"] == status, body
    return body["message"]


class Member:
    """A user bound as owner in a project of its own, with a token scoped to it."""

    def __init__(self, server, admin, role="owner"):
        self.project = make_project(admin)
        user, name, password = make_user(admin)
        bind(admin, user, role, self.project)
        self.client = server.client(server.login(name, password,
                                                 scope=f"project:{self.project}"))


@pytest.fixture(scope="module")
def member(server, admin):
    return Member(server, admin)


@pytest.fixture(scope="module")
def other(server, admin):
    return Member(server, admin)
