"""A config path with a trailing newline (issue 25): "/etc/x\n" passed the `^...$`
pattern, and the agent wrote a file named `x\n`. Now the API refuses it (and every
control character in a path) with 400, changing nothing, and the node refuses it too."""

import pytest

from appliance import files
from tests.compute.conftest import created, refused

from .helpers import C, config_body, hw_node


@pytest.fixture(scope="module")
def node(admin):
    return hw_node(admin)


@pytest.mark.parametrize("path", ["/etc/x\n", "/etc/app.conf\n", "/etc/a\nb", "/etc/a\tb",
                                  "/etc/x\r", "/etc/x\x7f"])
def test_a_path_with_a_control_character_is_400(admin, node, path):
    before = admin.get(C).json
    message = refused(admin.post(C, config_body(node["uuid"], path=path)), 400)
    assert message.startswith("path:"), message
    assert admin.get(C).json == before
    # nor by an update of a config that exists
    config = created(admin.post(C, config_body(node["uuid"])))
    message = refused(admin.put(f"{C}/{config['uuid']}", {"path": path}), 400)
    assert message.startswith("path:"), message
    assert admin.get(f"{C}/{config['uuid']}").json == config


def test_the_same_path_without_the_newline_is_taken(admin, node):
    assert created(admin.post(C, config_body(node["uuid"], path="/etc/x")))["path"] == "/etc/x"


@pytest.mark.parametrize("path", ["/etc/x\n", "/etc/a\x01b"])
def test_the_node_refuses_it_too(path):
    with pytest.raises(files.PathRefused, match="control character"):
        files.split(path)
