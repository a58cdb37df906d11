import os

import pytest

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

from .helpers import register_appliance

LB_IMAGE = "file:///var/lib/appliance/images/node.qcow2"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The API with lb_image set (type core is allowed) and the appliance's own node
    registered and enrolled as first boot does (type core_agent is the default)."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    lb_image=LB_IMAGE).start()
    register_appliance(srv.store)
    yield srv
    srv.stop()


@pytest.fixture
def bare_server(tmp_path):
    """No lb_image, no appliance node: a fresh development state."""
    srv = ApiServer(os.path.join(str(tmp_path), "state"), ADMIN_PASSWORD).start()
    yield srv
    srv.stop()


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
