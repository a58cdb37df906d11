import random

import pytest

from appliance.versions import (
    Constraint, ConstraintFormatError, VersionError, constraints_from_requirement,
    describe, parse, parse_constraint, satisfies,
)

# (lower, higher, why): each pair must compare strictly lower < higher.
ORDER = [
    ("1.2.3", "1.2.4", "patch"),
    ("1.2.9", "1.3.0", "minor beats patch"),
    ("1.9.9", "2.0.0", "major beats minor"),
    ("1.2.10", "1.10.2", "numbers compare numerically, not as text"),
    ("0.0.0", "0.0.1", "zero is a version"),
    # release > any suffixed version of the same triple (spec 9.2)
    ("1.2.3-rc.1", "1.2.3", "release beats pre-release"),
    ("1.2.3.dev4", "1.2.3", "release beats dev"),
    ("1.2.3dev4", "1.2.3", "release beats attached dev"),
    ("1.2.3-dev.20240101+abc", "1.2.3", "release beats dated dev"),
    ("1.2.3-zzz.99", "1.2.3", "release beats any suffix"),
    # ... but a suffixed version of a higher triple beats a lower release
    ("1.2.3", "1.2.4-alpha", "higher triple wins over release flag"),
    ("1.2.3", "1.2.4.dev1", "higher triple wins over release flag (dev)"),
    # dev vs pre-release: plain identifier comparison, "dev" is not special
    ("1.2.3-alpha", "1.2.3.dev4", "alpha < dev lexically"),
    ("1.2.3.dev4", "1.2.3rc1", "dev < rc lexically"),
    ("1.2.3-beta", "1.2.3-dev.1", "beta < dev lexically"),
    # numeric vs lexical identifiers
    ("1.2.3rc2", "1.2.3rc10", "letters/digits split: rc2 < rc10"),
    ("1.2.3-rc.2", "1.2.3-rc.10", "numeric identifiers compare numerically"),
    ("1.2.3.dev9", "1.2.3.dev10", "dev9 < dev10"),
    ("1.2.3-dev.20231231", "1.2.3-dev.20240101", "dated dev builds"),
    ("1.2.3-1", "1.2.3-alpha", "numeric identifier < alphanumeric"),
    ("1.2.3-rc", "1.2.3-rc.1", "longer identifier list wins"),
    ("1.2.3-rc", "1.2.3rc1", "longer list wins across spellings"),
    ("1.2.3-Alpha", "1.2.3-beta", "words compare ignoring case"),
    # the semver.org precedence example, pairwise
    ("1.0.0-alpha", "1.0.0-alpha.1", "semver example"),
    ("1.0.0-alpha.1", "1.0.0-alpha.beta", "semver example"),
    ("1.0.0-alpha.beta", "1.0.0-beta", "semver example"),
    ("1.0.0-beta", "1.0.0-beta.2", "semver example"),
    ("1.0.0-beta.2", "1.0.0-beta.11", "semver example"),
    ("1.0.0-beta.11", "1.0.0-rc.1", "semver example"),
    ("1.0.0-rc.1", "1.0.0", "semver example"),
]

# Different spellings with the same precedence.
EQUAL = [
    ("1.2.3+build.5", "1.2.3", "build metadata ignored"),
    ("1.2.3+a", "1.2.3+b", "build metadata ignored"),
    ("1.2.3-dev.20240101+abc", "1.2.3-dev.20240101", "build metadata ignored on dev"),
    ("1.2.3rc1", "1.2.3-rc.1", "spellings of rc1"),
    ("1.2.3rc1", "1.2.3-rc1", "spellings of rc1"),
    ("1.2.3.dev4", "1.2.3dev4", "spellings of dev4"),
    ("1.2.3.dev4", "1.2.3-dev.4", "spellings of dev4"),
    ("1.2.3-RC.1", "1.2.3-rc.1", "case ignored"),
]


@pytest.mark.parametrize("lower,higher,why", ORDER)
def test_ordering(lower, higher, why):
    a, b = parse(lower), parse(higher)
    assert a < b and b > a and a <= b and b >= a, why
    assert a != b and not (a > b) and not (b < a), why


@pytest.mark.parametrize("left,right,why", EQUAL)
def test_equal_precedence(left, right, why):
    a, b = parse(left), parse(right)
    assert a == b and hash(a) == hash(b) and not a < b and not b < a, why
    assert str(a) == left and str(b) == right      # text is kept as written


def test_sorting_a_shuffled_list():
    expected = [
        "0.0.0", "0.9.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
        "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0.dev1", "1.0.0-dev.20240101+abc",
        "1.0.0rc1", "1.0.0rc2", "1.0.0rc10", "1.0.0", "1.0.1", "1.2.0", "1.10.0", "2.0.0",
    ]
    for seed in range(20):
        shuffled = expected[:]
        random.Random(seed).shuffle(shuffled)
        assert [str(v) for v in sorted(parse(t) for t in shuffled)] == expected
    assert str(max(map(parse, expected))) == "2.0.0"


@pytest.mark.parametrize("text,major,minor,patch,suffix,build", [
    ("1.2.3", 1, 2, 3, None, None),
    ("1.2.3-rc.1", 1, 2, 3, "rc.1", None),
    ("1.2.3-alpha", 1, 2, 3, "alpha", None),
    ("1.2.3.dev4", 1, 2, 3, "dev4", None),
    ("1.2.3dev4", 1, 2, 3, "dev4", None),
    ("1.2.3rc1", 1, 2, 3, "rc1", None),
    ("1.2.3+build.5", 1, 2, 3, None, "build.5"),
    ("1.2.3-dev.20240101+abc", 1, 2, 3, "dev.20240101", "abc"),
    ("10.20.30", 10, 20, 30, None, None),
    ("0.0.0", 0, 0, 0, None, None),
])
def test_parse_fields(text, major, minor, patch, suffix, build):
    v = parse(text)
    assert (v.major, v.minor, v.patch, v.suffix, v.build) == (major, minor, patch, suffix, build)
    assert str(v) == text and repr(v) == f"Version({text!r})"
    assert v.is_dev is (suffix is not None) and v.is_release is (suffix is None)


def test_build_metadata_alone_is_a_release():
    assert parse("1.2.3+build.5").is_release


def test_parse_returns_a_version_as_is():
    v = parse("1.2.3")
    assert parse(v) is v


@pytest.mark.parametrize("text", [
    "", "1", "1.2", "1.2.3.4", "v1.2.3", "01.2.3", "1.02.3", "1.2.03", " 1.2.3", "1.2.3 ",
    "1.2.3-", "1.2.3+", "1.2.3-rc..1", "1.2.3-rc.", "1.2.3.", "1.2.3_rc1", "1.2.3-rc_1",
    "1.2.x", "a.b.c", "1..3", "1.2.3++a", "1.2.3-rc+", "１.2.3", "latest",
])
def test_invalid_versions(text):
    with pytest.raises(VersionError) as info:
        parse(text)
    assert repr(text) in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [None, 1, 1.0, b"1.2.3"])
def test_non_string_versions(value):
    with pytest.raises(VersionError, match=repr(value).replace(".", r"\.")):
        parse(value)


def test_versions_do_not_compare_with_strings():
    assert parse("1.2.3") != "1.2.3"
    with pytest.raises(TypeError):
        parse("1.2.3") < "1.2.4"


# (constraint, version, expected): every operator at and around its bound.
BOUNDARIES = [
    ("==1.0.0", "1.0.0", True),
    ("==1.0.0", "1.0.0+build", True),        # build metadata ignored
    ("==1.0.0", "1.0.1", False),
    ("==1.0.0", "1.0.0-rc1", False),
    ("==1.0.0-rc1", "1.0.0-rc.1", True),
    (">1.0.0", "1.0.0", False),
    (">1.0.0", "1.0.1-alpha", True),
    (">1.0.0", "1.0.1", True),
    (">1.0.0-rc1", "1.0.0", True),
    (">=1.0.0", "1.0.0", True),
    (">=1.0.0", "0.9.9", False),
    (">=1.0.0", "1.0.0.dev1", False),        # a dev of the bound is below the bound
    (">=1.0.0", "1.0.0-rc1", False),
    ("<1.0.0", "1.0.0", False),              # to_version is exclusive
    ("<1.0.0", "0.9.9", True),
    ("<1.0.0", "1.0.0.dev1", True),          # ... and a dev of the bound is below it
    ("<1.0.0", "1.0.0-rc1", True),           # semver: 1.0.0-rc1 < 1.0.0
    ("<1.0.0", "1.0.0+build", False),
    ("<1.0.0-0", "1.0.0-rc1", False),        # the way to exclude pre-releases of the bound
    ("<1.0.0-0", "1.0.0.dev1", False),
    ("<1.0.0-0", "0.9.9", True),
    ("<=1.0.0", "1.0.0", True),
    ("<=1.0.0", "1.0.1-alpha", False),
    ("<=1.0.0", "1.0.0-rc1", True),
]


@pytest.mark.parametrize("constraint,version,expected", BOUNDARIES)
def test_operator_boundaries(constraint, version, expected):
    c = parse_constraint(constraint)
    assert c.matches(version) is expected
    assert satisfies(version, [c]) is expected
    assert satisfies(parse(version), [c]) is expected


def test_requirement_from_the_example_manifest():
    constraints = constraints_from_requirement({"from_version": "0.0.0", "to_version": "1.0.0"})
    assert constraints == [Constraint(">=", "0.0.0"), Constraint("<", "1.0.0")]
    assert describe(constraints) == ">=0.0.0, <1.0.0"
    assert satisfies("0.0.0", constraints)
    assert satisfies("0.9.9", constraints)
    assert satisfies("1.0.0-rc1", constraints)
    assert not satisfies("1.0.0", constraints)
    assert not satisfies("0.0.0-dev1", constraints)


def test_requirement_keys_map_to_operators():
    constraints = constraints_from_requirement(
        {"version": "1.2.3", "to_version": "2.0.0", "from_version": "1.0.0"})
    assert [(c.op, str(c.version)) for c in constraints] == [
        (">=", "1.0.0"), ("<", "2.0.0"), ("==", "1.2.3")]
    assert describe(constraints) == ">=1.0.0, <2.0.0, ==1.2.3"


@pytest.mark.parametrize("requirement", [{}, None])
def test_empty_requirement_means_any_version(requirement):
    constraints = constraints_from_requirement(requirement)
    assert constraints == []
    assert satisfies("0.0.0-dev", constraints) and satisfies("99.0.0", constraints)
    assert describe(constraints) == "any version"


@pytest.mark.parametrize("requirement,named", [
    ({"min_version": "1.0.0"}, "'min_version'"),
    ({"from_version": "1.0.0", "max": "2.0.0"}, "'max'"),
    ({"from_version": 1.0}, "'from_version'"),
    ({"to_version": 2}, "'to_version'"),
    ({"version": None}, "'version'"),
    ({"version": ["1.0.0"]}, "'version'"),
    ({"version": "1.0"}, "'version'"),
    ({"to_version": "latest"}, "'to_version'"),
])
def test_requirement_format_errors(requirement, named):
    with pytest.raises(ConstraintFormatError) as info:
        constraints_from_requirement(requirement)
    assert named in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("requirement", ["1.0.0", ["1.0.0"], 1])
def test_requirement_must_be_a_mapping(requirement):
    with pytest.raises(ConstraintFormatError):
        constraints_from_requirement(requirement)


@pytest.mark.parametrize("op", ["!=", "~=", "=", "===", "=>", "^", "~", "", "in", ">>"])
def test_unknown_operators_are_format_errors(op):
    with pytest.raises(ConstraintFormatError):
        Constraint(op, "1.0.0")


@pytest.mark.parametrize("text", [
    "!=1.0.0", "~=1.0.0", "^1.0.0", "=1.0.0", "===1.0.0", "=>1.0.0", "1.0.0", ">=", "",
    ">=1.0", ">=latest", "<1.0.0, >0.1.0",
])
def test_parse_constraint_format_errors(text):
    with pytest.raises(ConstraintFormatError) as info:
        parse_constraint(text)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("text,op,version", [
    (">=1.0.0", ">=", "1.0.0"),
    ("<= 2.0.0-rc.1", "<=", "2.0.0-rc.1"),
    ("  ==1.2.3+b  ", "==", "1.2.3+b"),
    (">0.0.0.dev1", ">", "0.0.0.dev1"),
    ("<1.0.0", "<", "1.0.0"),
])
def test_parse_constraint(text, op, version):
    c = parse_constraint(text)
    assert (c.op, str(c.version)) == (op, version)
    assert str(c) == f"{op}{version}"
    assert parse_constraint(str(c)) == c


def test_constraint_with_invalid_version_is_a_format_error():
    with pytest.raises(ConstraintFormatError, match="'1.0'"):
        Constraint(">=", "1.0")


def test_constraints_are_hashable_values():
    assert Constraint(">=", "1.0.0") == Constraint(">=", parse("1.0.0"))
    assert len({Constraint("<", "1.0.0"), parse_constraint("<1.0.0")}) == 1


def test_satisfies_needs_every_constraint():
    constraints = [parse_constraint(">=1.0.0"), parse_constraint("<2.0.0"),
                   parse_constraint("<=1.5.0")]
    assert satisfies("1.5.0", constraints)
    assert not satisfies("1.6.0", constraints)
    with pytest.raises(VersionError):
        satisfies("1.6", constraints)
