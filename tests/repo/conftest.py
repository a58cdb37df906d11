import os
import uuid

import pytest
import yaml

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.secret.conftest import DaemonProcess, wait_for

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
R = "/v1/repo/repositories"
E = "/v1/repo/elements"


# the test repositories are served on loopback, also for projects' repositories: the
# admin's setting allows it, as it would allow an outside repository server
# (tenancy/addresses; tests/tenancy shows the refusal without it)
LOOPBACK_ALLOWED = {"allowed_outside_networks": "127.0.0.0/8"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    **LOOPBACK_ALLOWED).start()
    builder = DaemonProcess("builder", srv.settings["state_dir"], env={
        "APPLIANCE_ALLOWED_OUTSIDE_NETWORKS": LOOPBACK_ALLOWED["allowed_outside_networks"]
    }).start()
    yield srv
    builder.stop()
    srv.stop()


def manifest(name, version, requires=None, secret_value=None):
    return {"name": name, "version": version, "description": f"{name} {version}",
            "requirements": requires or {},
            "resources": {"$core.secret.secrets": {"s": {
                "name": f"{name}-secret", "project_id": ADMIN_PROJECT,
                "constructor": {"kind": "plain"},
                "default_value": secret_value or f"{name} {version}"}}}}


def write_manifest(directory, m, file_name=None):
    path = os.path.join(directory, file_name or f"{m['name']}-{m['version']}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(m, f)
    return path


def make_repo(admin, driver_spec, **fields):
    body = {"name": f"repo-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT,
            "driver_spec": driver_spec, **fields}
    resp = admin.post(R, body)
    assert resp.status == 201, resp
    return resp.json


def wait_repo(admin, repo_uuid, status="ACTIVE", timeout=15):
    return wait_for(lambda: (r := admin.get(f"{R}/{repo_uuid}").json)["status"] == status
                    and r, timeout)


def elements_of(admin, repo_uuid, **query):
    return {(e["name"], e["version"]): e
            for e in admin.get(E, query={"repository": repo_uuid, **query}).json}


def wait_element(admin, element_uuid, status, timeout=20):
    return wait_for(lambda: (e := admin.get(f"{E}/{element_uuid}").json)["status"] == status
                    and e, timeout)


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
