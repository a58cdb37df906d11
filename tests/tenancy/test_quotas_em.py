"""Quotas hold for the records an element creates: the real builder daemon creates them
through the API's resource code (Resource.create_record), so an element that would take a
project past a limit stops in ERROR with the quota's message, and the project holds no
more than its limit."""

import pytest

from tests.apiserver import ApiServer
from tests.compute.conftest import created
from tests.conftest import ADMIN_PASSWORD
from tests.em.conftest import install, wait_element
from tests.iam.helpers import make_project
from tests.secret.conftest import DaemonProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    quota_volumes=2).start()
    # the builder is a process of its own: the setting reaches it as a variable
    builder = DaemonProcess("builder", srv.settings["state_dir"],
                            env={"APPLIANCE_QUOTA_VOLUMES": "2"}).start()
    yield srv
    builder.stop()
    srv.stop()


def volumes_manifest(name, project, count):
    return {"name": name, "version": "1.0.0", "schema_version": 1, "api_version": "v1",
            "requirements": {"core": {"from_version": "0.0.0"}},
            "resources": {"$core.compute.volumes": {
                f"v{i}": {"name": f"{name}-v{i}", "project_id": project, "size": 1}
                for i in range(count)}}}


def test_an_element_cannot_take_a_project_past_a_quota(server, admin):
    project = make_project(admin)
    created(admin.post("/v1/compute/volumes", {"name": "mine", "project_id": project,
                                               "size": 1}))
    install(admin, volumes_manifest("vols", project, 3))
    element = wait_element(admin, "vols", status="ERROR", timeout=30)
    assert f"quota volumes of project {project}: use 2 + 1 requested exceeds the limit 2" \
        in str(element), element
    assert len(server.store.collection("compute_volumes").by("project_id", project)) == 2
