import uuid

import pytest

from tests.agent import testcap
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
NODES = "/v1/compute/nodes"


@pytest.fixture(scope="module")
def capserver(tmp_path_factory):
    """A real API with the test capability "testfile" registered (tests/agent/testcap.py)."""
    testcap.install()
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    yield srv
    srv.stop()
    testcap.uninstall()


@pytest.fixture(scope="module")
def capadmin(capserver):
    return capserver.client(capserver.login("admin", ADMIN_PASSWORD))


def hw_node(admin, **fields):
    resp = admin.post(NODES, {"name": f"hw-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT,
                              "cores": 1, "ram": 1024, "node_type": "HW", **fields})
    assert resp.status == 201, resp
    return resp.json


def enroll(server, admin, node_uuid, name=None):
    """The credential of a fresh enrollment of the node's agent."""
    minted = admin.post(f"{NODES}/{node_uuid}/actions/enroll/invoke")
    assert minted.status == 200, minted
    body = {"token": minted.json["token"], **({"name": name} if name else {})}
    resp = server.client().post("/v1/ua/enroll", body)
    assert resp.status == 200, resp
    return resp.json


def agent_token(server, credential):
    resp = server.client().post("/v1/iam/clients/default/actions/get_token/invoke", {
        "grant_type": "client_credentials", "client_id": credential["agent"],
        "client_secret": credential["secret"]})
    assert resp.status == 200, resp
    return resp.json["access_token"]


def add_file(store, target, path, content, **extra):
    return store.collection(testcap.MASTER_KIND).insert(
        {"target": target, "path": path, "content": content, **extra})


def refused(resp, status):
    assert resp.status == status, resp
    body = resp.json
    assert set(body) == {"type", "code", "message"} and body["code"] == status, body
    return body["message"]


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
