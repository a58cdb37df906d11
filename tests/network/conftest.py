import pytest

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD


@pytest.fixture(scope="module")
def net_server(tmp_path_factory):
    """A real API server whose new networks are isolated (as in every test here)."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    network_routing="isolated").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def admin(net_server):
    return net_server.client(net_server.login("admin", ADMIN_PASSWORD))


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
