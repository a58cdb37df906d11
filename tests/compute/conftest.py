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


@pytest.fixture(scope="session")
def tcg_env(tmp_path_factory):
    """The appliance in a test network namespace with its libvirt registered as a
    hypervisor (tests/compute/tcg.py), made once for the VM tests of a run
    (test_e2e_tcg.py, test_two_hypervisors.py): its start and libvirt's first QEMU probe
    are paid once. Each module leaves it as it found it (its nodes, sets and extra
    hypervisors deleted)."""
    import faulthandler

    from tests.compute import tcg
    reason = tcg.missing()
    if reason:
        pytest.skip(reason)
    faulthandler.cancel_dump_traceback_later()
    with tcg.appliance_in_netns(str(tmp_path_factory.mktemp("tcg-env"))) as env:
        env.hypervisor = env.register_hypervisor()
        yield env
