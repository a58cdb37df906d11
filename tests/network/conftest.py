import pytest

from appliance import config
from state import Store

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


def settings_for(directory, **extra):
    """The settings of a state directory whose new networks are isolated."""
    return config.load(environ={}, overrides={"state_dir": directory,
                                              "network_routing": "isolated", **extra})


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "state"))
    yield s
    s.close()


@pytest.fixture
def settings(store):
    return settings_for(store.directory)
