import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

from tests.apiserver import ApiServer  # noqa: E402

ADMIN_PASSWORD = "admin-password-for-tests"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real Waitress server on a loopback port, over a fresh state dir, per test module."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    yield srv
    srv.stop()


@pytest.fixture
def fresh_server(tmp_path):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def admin(server):
    return server.client(server.login("admin", ADMIN_PASSWORD))
