"""The CLI against the real API (real app, real Waitress, real IAM)."""

import pytest

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

from .conftest import Cli


@pytest.fixture(scope="module")
def real_api(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    yield srv
    srv.stop()


@pytest.fixture
def cli(real_api, tmp_path):
    return Cli(tmp_path / "config", f"http://127.0.0.1:{real_api.port}")


def test_login_crud_logout_against_the_real_api(cli):
    assert cli("login", "--password-stdin", stdin=ADMIN_PASSWORD + "\n").code == 0
    created = cli("--json", "create", "iam/projects", "name=cli-made")
    assert created.code == 0, created.stderr
    uuid = created.json()["uuid"]
    listed = cli("--json", "list", "/v1/iam/projects/", "--filter", "name=cli-made")
    assert [p["uuid"] for p in listed.json()] == [uuid]
    assert cli("--json", "update", f"iam/projects/{uuid}", "description=via cli").json()[
        "description"] == "via cli"
    missing = cli("show", "iam/projects/00000000-0000-0000-0000-00000000beef")
    assert missing.code == 1 and "not found" in missing.stderr
    bad = cli("create", "iam/projects", "name=cli-made")
    assert bad.code == 1 and "already exists" in bad.stderr
    assert cli("delete", f"iam/projects/{uuid}").code == 0
    who = cli("--json", "whoami")
    assert who.code == 0 and who.json()["permissions"] == ["*.*.*"]
    assert cli("logout").code == 0
    assert cli("list", "iam/users").code == 5


def test_wrong_password_is_a_client_error(cli):
    result = cli("login", "--password-stdin", stdin="wrong-password\n")
    assert result.code == 1
    assert "invalid_grant" in result.stderr
