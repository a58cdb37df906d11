"""Dependency resolution (spec 3.3 rules 1-6, 2.5 bindings): pure, no store."""

import dataclasses
from collections import defaultdict

import pytest

from appliance.repo.resolver import (
    Candidate, DependencyConstraintError, DependencyFormatError, DependencyNotFound,
    Resolution, ResolutionError, preference_key, resolve,
)
from appliance.versions import ConstraintFormatError


def el(name, version, requires=None, *, priority=8192, installed=False, lazy=False,
       uuid=None):
    """A candidate; uuid defaults to name@version/priority (readable in failures)."""
    return Candidate(uuid=uuid or f"{name}@{version}/{priority}{'/i' if installed else ''}",
                     name=name, version=version, priority=priority, installed=installed,
                     requirements=None if lazy else dict(requires or {}))


class World:
    """Elements across repositories; counts what the resolver asks for."""

    def __init__(self, *elements, lazy=()):
        self.by_name = defaultdict(list)
        self.manifests = {}             # uuid -> requirements of lazy elements
        self.asked, self.loaded = [], []
        for e in elements:
            self.add(e)

    def add(self, e, lazy=False):
        if lazy:
            self.manifests[e.uuid] = e.requirements
            e = dataclasses.replace(e, requirements=None)
        self.by_name[e.name].append(e)
        return e

    def candidates_for(self, name):
        self.asked.append(name)
        return iter(self.by_name.get(name, ()))        # any iterable will do

    def load(self, candidate):
        self.loaded.append(candidate.uuid)
        return dataclasses.replace(candidate, requirements=self.manifests[candidate.uuid])

    def resolve(self, target):
        return resolve(target, self.candidates_for, self.load)


def labels(candidates):
    return [str(c) for c in candidates]


def chosen(requirement, available, **target):
    """Resolve app -> lib(requirement) among lib versions; the lib version chosen."""
    world = World(*[v if isinstance(v, Candidate) else el("lib", v) for v in available])
    result = world.resolve(el("app", "1.0.0", {"lib": requirement}, **target))
    assert [c.name for c in result.order] == ["lib", "app"]
    return result.order[0]


# ---- rules 4 and 6: each operator and its boundaries --------------------------------------

OPERATORS = [
    # (requirement, versions available, version chosen or None for not found, why)
    ({"version": "1.0.0"}, ["0.9.9", "1.0.0", "1.0.1"], "1.0.0", "== picks the exact one"),
    ({"version": "1.0.0"}, ["0.9.9", "1.0.1"], None, "== nothing else"),
    ({"version": "1.0.0"}, ["1.0.0-rc.1", "1.0.0.dev1"], None, "== a dev is not the release"),
    ({"version": "1.0.0-rc.1"}, ["1.0.0", "1.0.0-rc.1"], "1.0.0-rc.1", "== a dev version"),
    ({"version": "1.0.0"}, ["1.0.0+build.7"], "1.0.0+build.7", "== build metadata ignored"),
    ({"from_version": "1.0.0"}, ["0.9.9", "1.0.0"], "1.0.0", ">= inclusive"),
    ({"from_version": "1.0.0"}, ["0.9.9", "1.0.0-rc.1"], None, ">= a dev of the bound is below"),
    ({"from_version": "1.0.0"}, ["0.9.9", "1.0.1.dev1"], "1.0.1.dev1", ">= a dev above it"),
    ({"from_version": "1.0.0-rc.1"}, ["1.0.0-beta", "1.0.0-rc.1"], "1.0.0-rc.1", ">= dev bound"),
    ({"to_version": "1.0.0"}, ["0.9.9", "1.0.0", "1.1.0"], "0.9.9", "< exclusive"),
    ({"to_version": "1.0.0"}, ["1.0.0"], None, "< the bound itself is out"),
    ({"to_version": "1.0.0"}, ["1.0.0-rc.1", "1.0.0"], "1.0.0-rc.1", "< a dev of the bound is in"),
    ({"to_version": "1.0.0-0"}, ["1.0.0-rc.1", "1.0.0.dev1"], None, "< x-0 excludes its devs"),
    ({"to_version": "1.0.0-0"}, ["0.9.9", "1.0.0-rc.1"], "0.9.9", "< x-0 keeps below"),
    ({"from_version": "1.0.0", "to_version": "2.0.0"}, ["0.9.0", "1.0.0", "1.5.0", "2.0.0"],
     "1.5.0", "range: highest inside"),
    ({"from_version": "1.0.0", "to_version": "1.0.0"}, ["1.0.0"], None, "empty range"),
    ({"from_version": "1.0.0", "to_version": "2.0.0", "version": "1.2.0"},
     ["1.0.0", "1.2.0", "1.9.0"], "1.2.0", "all three keys together"),
    ({}, ["0.1.0", "3.0.0", "2.0.0"], "3.0.0", "no constraint: any version"),
    (None, ["0.1.0", "3.0.0"], "3.0.0", "null requirement: any version"),
    ({"from_version": "1.2.10"}, ["1.2.9", "1.10.2"], "1.10.2", "numeric, not text, order"),
]


@pytest.mark.parametrize("requirement, available, expected, why", OPERATORS,
                         ids=[row[-1] for row in OPERATORS])
def test_operator_boundaries(requirement, available, expected, why):
    if expected is None:
        with pytest.raises(DependencyNotFound):
            chosen(requirement, available)
    else:
        assert chosen(requirement, available).version == expected


# ---- rule 5: the sort key ---------------------------------------------------------------------

def c(version, priority=8192, installed=False, uuid=None):
    return el("lib", version, priority=priority, installed=installed, uuid=uuid)


PREFERENCES = [
    # (candidates in the order candidates_for gives them, uuid chosen, why)
    ([c("1.0.0.dev1"), c("1.0.0"), c("1.0.0-rc.1")], "lib@1.0.0/8192",
     "release over dev of the same triple"),
    ([c("1.1.0.dev1"), c("1.0.0")], "lib@1.0.0/8192",
     "release over dev even of a higher triple (release before version in the key)"),
    ([c("1.0.0-alpha"), c("1.0.0.dev3"), c("1.0.0rc1")], "lib@1.0.0rc1/8192",
     "only devs: the highest dev"),
    ([c("2.0.0", 100), c("1.0.0", 200)], "lib@1.0.0/200",
     "higher priority over higher version"),
    ([c("1.0.0", 100), c("1.0.0.dev1", 200)], "lib@1.0.0.dev1/200",
     "higher priority over release"),
    ([c("1.0.0", 500), c("1.2.0", 500), c("1.1.0", 500), c("9.0.0", 499)], "lib@1.2.0/500",
     "priority tie broken by version"),
    ([c("0.1.0", 0, installed=True), c("9.0.0", 16384)], "lib@0.1.0/0/i",
     "installed over higher priority and version"),
    ([c("1.0.0.dev1", installed=True), c("1.0.0")], "lib@1.0.0.dev1/8192/i",
     "installed over release"),
    ([c("1.0.0", 7, uuid="first"), c("1.0.0", 7, uuid="second")], "first",
     "full tie: the first given"),
    ([c("1.0.0+b", uuid="first"), c("1.0.0+a", uuid="second")], "first",
     "equal precedence (build metadata): the first given"),
    ([c("not-a-version"), c("1.0.0")], "lib@1.0.0/8192", "an invalid version is never chosen"),
]


@pytest.mark.parametrize("candidates, expected, why", PREFERENCES,
                         ids=[row[-1] for row in PREFERENCES])
def test_preference(candidates, expected, why):
    assert chosen({}, candidates).uuid == expected


def test_preference_key_is_the_whole_order():
    best_first = [c("0.5.0", 0, installed=True), c("1.0.0", 300), c("3.0.0.dev1", 300),
                  c("2.0.0", 200), c("1.9.0", 200), c("2.1.0-rc.1", 200), c("2.0.0-rc.1", 200)]
    shuffled = best_first[3:] + best_first[:3][::-1]
    assert sorted(shuffled, key=preference_key, reverse=True) == best_first


# ---- rule 3: installed elements -------------------------------------------------------------

def test_installed_satisfying_is_chosen_and_flagged():
    world = World(el("lib", "1.1.0", installed=True), el("lib", "1.9.0", priority=16384))
    result = world.resolve(el("app", "1.0.0", {"lib": {"from_version": "1.0.0"}}))
    assert labels(result.order) == ["lib 1.1.0", "app 1.0.0"]
    assert labels(result.to_install) == ["app 1.0.0"]
    assert result.bindings == [("app@1.0.0/8192", "lib@1.1.0/8192/i")]


def test_installed_violating_constraint_is_an_error_even_with_other_candidates():
    world = World(el("lib", "2.0.0", priority=16384), el("lib", "1.1.0", installed=True))
    app = el("app", "1.0.0", {"lib": {"from_version": "1.5.0", "to_version": "3.0.0"}})
    with pytest.raises(DependencyConstraintError) as info:
        world.resolve(app)
    error = info.value
    assert isinstance(error, ResolutionError) and error.status == 409
    assert error.requirement == "lib" and error.required_by == app
    assert error.candidate.version == "1.1.0"
    assert str(error) == ("dependency lib (>=1.5.0, <3.0.0) required by app 1.0.0: "
                          "the installed lib 1.1.0 does not satisfy it")


# ---- rule 4: not found ------------------------------------------------------------------------

def test_not_found_no_element_of_that_name():
    app = el("app", "1.0.0", {"ghost": {"from_version": "1.0.0"}})
    with pytest.raises(DependencyNotFound) as info:
        World().resolve(app)
    error = info.value
    assert isinstance(error, ResolutionError) and error.status == 409
    assert (error.requirement, error.required_by) == ("ghost", app)
    assert str(error) == ("dependency ghost (>=1.0.0) required by app 1.0.0 not found: "
                          "no element named ghost in any visible repository")


def test_not_found_none_satisfies_lists_versions():
    world = World(*[el("lib", f"1.{i}.0") for i in range(7)])
    mid = el("mid", "2.0.0", {"lib": {"from_version": "2.0.0"}})
    world.add(mid)
    with pytest.raises(DependencyNotFound) as info:
        world.resolve(el("app", "1.0.0", {"mid": None}))
    assert info.value.required_by == mid        # the requirer, not the target
    assert str(info.value) == (
        "dependency lib (>=2.0.0) required by mid 2.0.0 not found: none of the 7 elements "
        "named lib satisfies it (versions: 1.6.0, 1.5.0, 1.4.0, 1.3.0, 1.2.0, ...)")


# ---- rule 6: format errors ----------------------------------------------------------------------

BAD_FORMATS = [
    ({"from_version": "1.0"}, "'1.0'"),
    ({"to_version": "v1.0.0"}, "'v1.0.0'"),
    ({"minimum": "1.0.0"}, "unknown requirement key 'minimum'"),
    ({"version": 1}, "must be a string"),
    (">=1.0.0", "expected a mapping"),
    (["1.0.0"], "expected a mapping"),
]


@pytest.mark.parametrize("requirement, detail", BAD_FORMATS)
def test_bad_constraint_format(requirement, detail):
    world = World(el("lib", "1.0.0"))
    mid = world.add(el("mid", "1.0.0", {"lib": requirement}))
    with pytest.raises(DependencyFormatError) as info:
        world.resolve(el("app", "1.0.0", {"mid": {}}))
    error = info.value
    assert isinstance(error, ConstraintFormatError) and isinstance(error, ValueError)
    assert isinstance(error, ResolutionError) and error.status == 400
    assert (error.requirement, error.required_by) == ("lib", mid)
    assert str(error).startswith("dependency lib required by mid 1.0.0: ")
    assert detail in str(error)
    assert isinstance(error.__cause__, ConstraintFormatError)


def test_requirements_not_a_mapping():
    with pytest.raises(DependencyFormatError, match="requirements of app 1.0.0: expected"):
        resolve(Candidate("u", "app", "1.0.0", 1, False, ["lib"]), World().candidates_for)


# ---- one version per name -----------------------------------------------------------------------

def test_later_requirement_must_accept_the_first_choice():
    # app -> a -> lib (>=1.0.0 picks 2.0.0), then app -> b -> lib (<2.0.0): no backtracking
    world = World(el("lib", "1.0.0"), el("lib", "2.0.0"),
                  el("a", "1.0.0", {"lib": {"from_version": "1.0.0"}}),
                  el("b", "1.0.0", {"lib": {"to_version": "2.0.0"}}))
    with pytest.raises(DependencyConstraintError) as info:
        world.resolve(el("app", "1.0.0", {"a": {}, "b": {}}))
    error = info.value
    assert (error.requirement, error.required_by.name, error.candidate.version) == (
        "lib", "b", "2.0.0")
    assert str(error) == (
        "dependency lib (<2.0.0) required by b 1.0.0: lib 2.0.0, chosen for a 1.0.0 "
        "(>=1.0.0), does not satisfy it; only one version of a name can be used")


def test_later_requirement_accepting_the_first_choice_reuses_it():
    world = World(el("lib", "1.0.0"), el("lib", "2.0.0"),
                  el("a", "1.0.0", {"lib": {"from_version": "1.0.0"}}),
                  el("b", "1.0.0", {"lib": {"to_version": "3.0.0"}}))
    result = world.resolve(el("app", "1.0.0", {"a": {}, "b": {}}))
    assert labels(result.order) == ["lib 2.0.0", "a 1.0.0", "b 1.0.0", "app 1.0.0"]
    assert world.asked == ["a", "lib", "b"]          # each name looked up once


# ---- cycles -----------------------------------------------------------------------------------

def test_two_cycle_terminates():
    world = World(el("a", "1.0.0", {"b": {}}), el("b", "1.0.0", {"a": {}}))
    result = world.resolve(world.by_name["a"][0])
    assert labels(result.order) == ["b 1.0.0", "a 1.0.0"]     # the first reached comes last
    assert result.bindings == [("b@1.0.0/8192", "a@1.0.0/8192"),
                               ("a@1.0.0/8192", "b@1.0.0/8192")]


def test_three_cycle_terminates():
    world = World(el("a", "1.0.0", {"b": {}}), el("b", "1.0.0", {"c": {}}),
                  el("c", "1.0.0", {"a": {}}))
    result = world.resolve(world.by_name["a"][0])
    assert labels(result.order) == ["c 1.0.0", "b 1.0.0", "a 1.0.0"]
    uuid = {x.name: x.uuid for x in result.order}
    assert set(result.bindings) == {(uuid[x], uuid[y]) for x in "abc" for y in "abc" if x != y}
    assert len(result.bindings) == 6


def test_self_requirement_is_no_binding():
    a = el("a", "1.0.0", {"a": {"from_version": "1.0.0"}})
    result = resolve(a, World().candidates_for)
    assert labels(result.order) == ["a 1.0.0"] and result.bindings == []


def test_cycle_back_to_target_must_accept_the_target():
    world = World(el("b", "1.0.0", {"a": {"from_version": "2.0.0"}}), el("a", "2.0.0"))
    with pytest.raises(DependencyConstraintError, match=(
            r"required by b 1\.0\.0: a 1\.0\.0, the element being resolved, does not")):
        world.resolve(el("a", "1.0.0", {"b": {}}))
    assert world.asked == ["b"]                 # the target's name is never looked up


# ---- shapes: diamond, chain, manifest order ---------------------------------------------------

def test_diamond_has_the_shared_dependency_once_before_both():
    world = World(el("b", "1.0.0", {"d": {}}), el("c", "1.0.0", {"d": {}}),
                  el("d", "1.0.0"), el("d", "0.9.0"))
    result = world.resolve(el("a", "1.0.0", {"b": {}, "c": {}}))
    assert labels(result.order) == ["d 1.0.0", "b 1.0.0", "c 1.0.0", "a 1.0.0"]
    assert world.asked == ["b", "d", "c"]
    u = {x.name: x.uuid for x in result.order}
    assert result.bindings == [(u["b"], u["d"]), (u["c"], u["d"]),
                               (u["a"], u["d"]), (u["a"], u["b"]), (u["a"], u["c"])]


def test_four_level_chain_install_order_and_bindings():
    world = World(el("b", "1.0.0", {"c": {"from_version": "1.0.0"}}),
                  el("c", "1.0.0", {"d": {"to_version": "2.0.0"}}),
                  el("d", "1.5.0"), el("d", "2.0.0"))
    a = el("a", "1.0.0", {"b": {"version": "1.0.0"}})
    result = world.resolve(a)
    assert isinstance(result, Resolution)
    assert labels(result.order) == ["d 1.5.0", "c 1.0.0", "b 1.0.0", "a 1.0.0"]
    assert result.to_install == result.order and result.target == a
    u = {x.name: x.uuid for x in result.order}
    assert result.bindings == [
        (u["c"], u["d"]),
        (u["b"], u["d"]), (u["b"], u["c"]),
        (u["a"], u["d"]), (u["a"], u["c"]), (u["a"], u["b"]),
    ]


def test_installed_dependencies_stay_in_order_and_bindings():
    # spec 2.5: C depends on B and B on A gives (C,B), (C,A) and (B,A)
    world = World(el("b", "1.0.0", {"a": {}}, installed=True), el("b", "2.0.0", {"a": {}}),
                  el("a", "1.0.0", installed=True), el("a", "3.0.0"))
    target = el("c", "1.0.0", {"b": {}})
    result = world.resolve(target)
    assert labels(result.order) == ["a 1.0.0", "b 1.0.0", "c 1.0.0"]
    assert result.to_install == [target]
    u = {x.name: x.uuid for x in result.order}
    assert set(result.bindings) == {(u["c"], u["b"]), (u["c"], u["a"]), (u["b"], u["a"])}
    assert len(result.bindings) == 3


def test_installed_target_is_not_to_install():
    world = World(el("lib", "1.0.0"))
    result = world.resolve(el("app", "1.0.0", {"lib": {}}, installed=True))
    assert labels(result.to_install) == ["lib 1.0.0"]


def test_depth_first_in_manifest_order():
    world = World(el("x", "1.0.0", {"z": {}}), el("y", "1.0.0", {"w": {}}),
                  el("z", "1.0.0"), el("w", "1.0.0"))
    result = world.resolve(el("app", "1.0.0", {"y": {}, "x": {}}))
    assert labels(result.order) == ["w 1.0.0", "y 1.0.0", "z 1.0.0", "x 1.0.0", "app 1.0.0"]


def test_bindings_of_a_dense_dag_are_exact_and_unique():
    # n_i requires every n_j with j > i
    n = 6
    world = World(*[el(f"n{i}", "1.0.0", {f"n{j}": {} for j in range(i + 1, n)})
                    for i in range(1, n)])
    result = world.resolve(el("n0", "1.0.0", {f"n{j}": {} for j in range(1, n)}))
    assert labels(result.order) == [f"n{i} 1.0.0" for i in reversed(range(n))]
    pairs = [(int(x.split("@")[0][1:]), int(y.split("@")[0][1:])) for x, y in result.bindings]
    assert pairs == [(i, j) for i in reversed(range(n)) for j in reversed(range(i + 1, n))]


def test_deep_chain_needs_no_recursion():
    depth = 1500        # beyond the default recursion limit of 1000
    world = World(*[el(f"p{i}", "1.0.0", {f"p{i + 1}": {}} if i + 1 < depth else {})
                    for i in range(1, depth)])
    result = world.resolve(el("p0", "1.0.0", {"p1": {}}))
    assert len(result.order) == depth and result.order[0].name == f"p{depth - 1}"
    assert len(result.bindings) == depth * (depth - 1) // 2


# ---- rule 1: lazy elements ----------------------------------------------------------------------

def test_lazy_candidates_are_loaded_only_when_chosen():
    world = World()
    for version in ("1.0.0", "1.1.0", "2.0.0"):
        world.add(el("lib", version, {"base": {"from_version": "1.0.0"}}), lazy=True)
    for version in ("0.9.0", "1.0.0"):
        world.add(el("base", version), lazy=True)
    world.add(el("mid", "1.0.0", {"lib": {"to_version": "2.0.0"}, "base": {}}), lazy=True)
    target = world.add(el("app", "1.0.0", {"mid": {}, "lib": {}}), lazy=True)
    result = world.resolve(target)
    assert labels(result.order) == ["base 1.0.0", "lib 1.1.0", "mid 1.0.0", "app 1.0.0"]
    # the target first, then each chosen element once; a name already chosen is not reloaded
    assert world.loaded == ["app@1.0.0/8192", "mid@1.0.0/8192", "lib@1.1.0/8192",
                            "base@1.0.0/8192"]
    assert all(x.requirements is not None for x in result.order)


def test_installed_lazy_candidate_is_loaded_when_chosen():
    world = World()
    world.add(el("lib", "1.0.0", installed=True), lazy=True)
    world.add(el("lib", "2.0.0"), lazy=True)
    result = world.resolve(el("app", "1.0.0", {"lib": {}}))
    assert world.loaded == ["lib@1.0.0/8192/i"] and result.order[0].installed


def test_lazy_without_load_is_a_type_error():
    world = World()
    world.add(el("lib", "1.0.0"), lazy=True)
    with pytest.raises(TypeError, match="lib 1.0.0 is lazy"):
        resolve(el("app", "1.0.0", {"lib": {}}), world.candidates_for)


def test_eager_candidates_are_never_loaded():
    world = World(el("lib", "1.0.0"))
    result = resolve(el("app", "1.0.0", {"lib": {}}), world.candidates_for,
                     load=lambda _: pytest.fail("load called for an eager candidate"))
    assert len(result.order) == 2


# ---- invalid versions in candidates ------------------------------------------------------------

def test_installed_with_invalid_version_violates():
    world = World(el("lib", "1.0", installed=True), el("lib", "1.0.0"))
    with pytest.raises(DependencyConstraintError, match="installed lib 1.0 does not"):
        world.resolve(el("app", "1.0.0", {"lib": {}}))


def test_only_invalid_versions_is_not_found():
    world = World(el("lib", "latest"))
    with pytest.raises(DependencyNotFound,
                       match=r"none of the 1 elements named lib satisfies it$"):
        world.resolve(el("app", "1.0.0", {"lib": {}}))
