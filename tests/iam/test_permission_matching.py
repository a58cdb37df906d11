import pytest

from appliance.iam.permissions import Principal, grants, is_valid

TABLE = [
    ("*.*.*", "secret.secret.read", True),
    ("*.*.*", "repo.repository.upload", True),
    ("repo.*.read", "repo.repository.read", True),
    ("repo.*.read", "repo.element.read", True),
    ("repo.*.read", "repo.repository.upload", False),
    ("repo.*.read", "secret.secret.read", False),
    ("repo.repository.*", "repo.repository.upload", True),
    ("repo.repository.*", "repo.repository.read", True),
    ("repo.repository.*", "repo.element.read", False),
    ("*.secret.read", "secret.secret.read", True),
    ("*.secret.read", "secret.secret.update", False),
    ("secret.secret.read", "secret.secret.read", True),
    ("secret.secret.read", "secret.secret.reader", False),
    ("secret.secret.rea*", "secret.secret.read", False),   # * only as a whole part
    ("repo.*", "repo.repository.read", False),              # two parts grant nothing
    ("*", "repo.repository.read", False),
    ("*.*.*.*", "repo.repository.read", False),
]


@pytest.mark.parametrize("granted,required,expected", TABLE)
def test_wildcard_table(granted, required, expected):
    assert grants(granted, required) is expected
    principal = Principal({"uuid": "u"}, None, [granted])
    assert principal.allows(required) is expected


def test_no_permissions_allow_nothing():
    assert not Principal({"uuid": "u"}, None, []).allows("iam.user.read")


@pytest.mark.parametrize("name,valid", [
    ("*.*.*", True), ("repo.repository.upload", True), ("a_b.c1.d", True),
    ("repo.repository", False), ("Repo.x.y", False), ("a..b", False), ("a.b.c.d", False),
    ("a.b.c*", False), ("", False),
])
def test_permission_names(name, valid):
    assert is_valid(name) is valid
