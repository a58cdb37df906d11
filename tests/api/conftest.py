import pytest

from tests.api import widgets
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real API with the test-only widgets resource (tests/api/widgets.py); a module that
    needs another server (test_tags: with the builder) defines its own `server`."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    extra=widgets.register).start()
    yield srv
    srv.stop()


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
