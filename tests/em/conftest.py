import glob
import os

import pytest
import yaml

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD, RUN_LOG_DIR
from tests.secret.conftest import DaemonProcess, wait_for

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    builder = DaemonProcess("builder", srv.settings["state_dir"]).start()
    delivery = DaemonProcess("delivery", srv.settings["state_dir"]).start()
    # the status of the services and configs that manifests make
    agent_status = DaemonProcess("status", srv.settings["state_dir"]).start()
    srv.builder = builder
    yield srv
    builder.stop()
    delivery.stop()
    agent_status.stop()
    srv.stop()


def builder_log(server):
    """Everything the builder process of this module logged so far."""
    text = ""
    for path in sorted(glob.glob(os.path.join(RUN_LOG_DIR, "builder-*.log"))):
        if f"-{id(server.builder)}-" in path:
            with open(path, errors="replace") as f:
                text += f.read()
    return text


def post_manifest(admin, manifest, as_yaml=True):
    if as_yaml:
        return admin.post("/v1/em/manifests", raw=yaml.safe_dump(manifest).encode(),
                          content_type="application/yaml")
    return admin.post("/v1/em/manifests", manifest)


def act(admin, manifest_uuid, action):
    return admin.post(f"/v1/em/manifests/{manifest_uuid}/actions/{action}/invoke", {})


def element(admin, name):
    found = admin.get("/v1/em/elements", query={"name": name}).json
    return found[0] if found else None


def wait_element(admin, name, status="ACTIVE", timeout=15):
    return wait_for(lambda: (e := element(admin, name)) and e["status"] == status and e,
                    timeout)


def install(admin, manifest):
    resp = post_manifest(admin, manifest)
    assert resp.status == 201, resp
    done = act(admin, resp.json["uuid"], "install")
    assert done.status == 200, done
    return resp.json["uuid"]


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
