"""Dependency resolution of repository elements (spec 3.3 "Dependency resolution", 2.5).

Pure: no store, no network. The caller hands in the element to install, a function giving
every RepoElement of a name across the visible repositories, and a function downloading a
lazy element's manifest. The result is the install order (dependencies first, the target
last), which of them still need installing, and the transitive dependency bindings.

    resolution = resolve(target, candidates_for, load)
    for candidate in resolution.to_install: ...        # the target is the last one
    for dependent, depends_on in resolution.bindings: ...

The whole choice policy is one sort key, `preference_key`: among the candidates of a name
that satisfy the requirement, the greatest wins. Everything else is bookkeeping:

1. a lazy candidate (requirements None) is loaded when it is chosen, never before;
2. for each requirement every element of that name is a candidate;
3. an installed element of that name violating the constraint -> DependencyConstraintError;
4. candidates not satisfying the constraint are dropped; none left -> DependencyNotFound;
5. the greatest `preference_key` is chosen: installed, priority, release, version;
6. a bad constraint -> DependencyFormatError (a ConstraintFormatError).

One version per name: the first choice of a name (or the target itself) is pinned, and a
later requirement on that name must accept it, or DependencyConstraintError. There is no
backtracking. Cycles terminate: a name already chosen is not visited again. See
docs/resolver.md.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
import functools

from appliance import versions
from appliance.versions import ConstraintFormatError, VersionError, describe, satisfies

__all__ = [
    "Candidate", "Resolution", "resolve", "preference_key",
    "ResolutionError", "DependencyNotFound", "DependencyConstraintError",
    "DependencyFormatError",
]


@dataclass(frozen=True)
class Candidate:
    """One RepoElement as the resolver sees it.

    `requirements` maps a name to {from_version, to_version, version} (or None: any
    version), as in the manifest. `requirements=None` marks a lazy element whose manifest
    has not been downloaded yet; `load` fills it in.
    """

    uuid: str
    name: str
    version: str                    # text; parsed with appliance.versions
    priority: int = 8192            # its repository's priority, 0..16384, higher preferred
    installed: bool = False
    requirements: Mapping | None = field(default=None, compare=False)

    def __str__(self):
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class Resolution:
    """The dependency closure of a target.

    order: every element of the closure once, in install order (each after what it
    requires, except along a cycle), the target last; installed ones included.
    bindings: (dependent uuid, depends_on uuid) for every element and every element it
    depends on directly or transitively; no duplicates, no (x, x). Sorted by the
    dependent's position in `order`, then the other's.
    """

    order: list
    bindings: list

    @property
    def target(self) -> Candidate:
        return self.order[-1]

    @property
    def to_install(self) -> list:
        """The elements not installed yet, in install order (the caller skips the rest)."""
        return [c for c in self.order if not c.installed]


class ResolutionError(Exception):
    """A requirement that cannot be met. `requirement` is the name required,
    `required_by` the Candidate requiring it, `constraints` what it asked for
    (None when it could not be read). `status` is the HTTP status the API answers."""

    status = 409

    def __init__(self, message, *, requirement, required_by, constraints=None,
                 candidate=None):
        super().__init__(message)
        self.message = message
        self.requirement = requirement
        self.required_by = required_by
        self.constraints = constraints
        self.candidate = candidate        # the element that does not satisfy it, if any


class DependencyNotFound(ResolutionError):
    """No element of the name satisfies the requirement (spec 3.3 rule 4)."""


class DependencyConstraintError(ResolutionError):
    """An element that must be used does not satisfy the requirement: the installed one
    of that name (rule 3), or the one already chosen in this resolution. `candidate` is
    that element."""


class DependencyFormatError(ResolutionError, ConstraintFormatError):
    """A requirement that is not a valid constraint (rule 6). Also a ConstraintFormatError
    (a ValueError); the cause is chained."""

    status = 400


@functools.lru_cache(maxsize=16384)
def _version(text):
    """Parsed version, cached: the same version texts recur across names and repositories."""
    return versions.parse(text)


def _version_or_none(candidate):
    try:
        return _version(candidate.version)
    except (VersionError, TypeError):         # TypeError: unhashable junk from a caller
        return None


def _admits(candidate, constraints):
    """Rule 4: the candidate's version satisfies every constraint (an invalid one: never)."""
    version = _version_or_none(candidate)
    return version is not None and satisfies(version, constraints)


def preference_key(candidate: Candidate) -> tuple:
    """THE choice policy (spec 3.3 rule 5): the candidate with the greatest key wins.

        (installed, priority, is_release, version)

    1. an installed element before any other;
    2. then the higher repository priority;
    3. then a release before a development version (one with a suffix), whatever the
       versions: at equal priority 1.0.0 wins over 2.0.0.dev1;
    4. then the higher version (appliance.versions ordering; build metadata ignored).
    Full ties (same version text in two repositories of one priority) go to the first in
    the order `candidates_for` gave. Only candidates with a valid version get here.
    """
    version = _version(candidate.version)
    return (candidate.installed, candidate.priority, version.is_release, version)


def resolve(target: Candidate, candidates_for: Callable[[str], Iterable[Candidate]],
            load: Callable[[Candidate], Candidate] | None = None) -> Resolution:
    """Resolve the dependency closure of `target`, depth-first in manifest order.

    candidates_for(name): every element of that name across the visible repositories.
    load(candidate): the same candidate with `requirements` filled in (a lazy element's
    manifest downloaded); called only for a candidate with requirements None, only once
    it is chosen (the target first, when it is lazy itself).

    Raises DependencyNotFound, DependencyConstraintError, DependencyFormatError (all
    ResolutionError). Iterative, so a deep chain does not hit the recursion limit.
    """
    target = _loaded(target, load)
    chosen = {target.name: target}             # name -> the one element of that name
    why = {target.name: None}                  # name -> (requirer, constraints) that chose it
    edges = {target.uuid: []}                  # uuid -> uuids it requires directly
    order = []
    stack = [(target, iter(_requirements(target).items()))]
    while stack:
        parent, pending = stack[-1]
        child = None                           # a newly chosen element: visit it first
        for name, requirement in pending:
            constraints = _constraints(parent, name, requirement)
            picked = chosen.get(name)
            if picked is None:
                picked = child = _loaded(
                    _choose(parent, name, constraints, candidates_for(name)), load)
                chosen[name], why[name] = picked, (parent, constraints)
                edges[picked.uuid] = []
            elif not _admits(picked, constraints):
                raise _disagreement(parent, name, constraints, picked, why[name])
            if picked.uuid != parent.uuid:
                edges[parent.uuid].append(picked.uuid)
            if child is not None:
                break
        if child is None:                      # all requirements of parent are placed
            stack.pop()
            order.append(parent)
        else:
            stack.append((child, iter(_requirements(child).items())))
    return Resolution(order=order, bindings=_bindings(order, edges))


def _choose(parent, name, constraints, candidates):
    """Rules 2-5: the best candidate of `name` satisfying `constraints`."""
    candidates = list(candidates)
    admitted = []
    for candidate in candidates:
        ok = _admits(candidate, constraints)
        if candidate.installed and not ok:
            raise DependencyConstraintError(
                f"dependency {name} ({describe(constraints)}) required by {parent}: the "
                f"installed {candidate} does not satisfy it",
                requirement=name, required_by=parent, constraints=constraints,
                candidate=candidate)
        if ok:
            admitted.append(candidate)
    if not admitted:
        raise DependencyNotFound(
            f"dependency {name} ({describe(constraints)}) required by {parent} not found: "
            + _available(name, candidates),
            requirement=name, required_by=parent, constraints=constraints)
    return max(admitted, key=preference_key)


def _available(name, candidates):
    if not candidates:
        return f"no element named {name} in any visible repository"
    valid = sorted({v for v in map(_version_or_none, candidates) if v is not None},
                   reverse=True)
    shown = ", ".join(map(str, valid[:5])) + (", ..." if len(valid) > 5 else "")
    return (f"none of the {len(candidates)} elements named {name} satisfies it"
            + (f" (versions: {shown})" if shown else ""))


def _disagreement(parent, name, constraints, picked, first):
    if first is None:
        chosen_how = "the element being resolved"
    else:
        first_parent, first_constraints = first
        chosen_how = f"chosen for {first_parent} ({describe(first_constraints)})"
    return DependencyConstraintError(
        f"dependency {name} ({describe(constraints)}) required by {parent}: {picked}, "
        f"{chosen_how}, does not satisfy it; only one version of a name can be used",
        requirement=name, required_by=parent, constraints=constraints, candidate=picked)


def _constraints(parent, name, requirement):
    """Rule 6: the requirement as constraints, or DependencyFormatError naming the requirer."""
    try:
        return versions.constraints_from_requirement(requirement)
    except ConstraintFormatError as exc:
        raise DependencyFormatError(
            f"dependency {name} required by {parent}: {exc}",
            requirement=name, required_by=parent) from exc


def _requirements(candidate):
    requirements = candidate.requirements         # never None here: see _loaded()
    if not isinstance(requirements, Mapping):
        raise DependencyFormatError(
            f"requirements of {candidate}: expected a mapping of name to "
            f"{{from_version, to_version, version}}, got {type(requirements).__name__}",
            requirement=None, required_by=candidate)
    return requirements


def _loaded(candidate, load):
    """Rule 1: a lazy candidate's manifest is downloaded before its requirements are read."""
    if candidate.requirements is not None:
        return candidate
    if load is None:
        raise TypeError(f"{candidate} is lazy (requirements None) and no load was given")
    loaded = load(candidate)
    if loaded.requirements is None:
        raise TypeError(f"load({candidate}) returned requirements None; "
                        "an element without requirements has {}")
    return loaded


def _bindings(order, edges):
    """Every (dependent, depends_on) pair of the transitive closure of `edges` (spec 2.5).

    `order` is a depth-first post-order, so without cycles everything an element requires
    precedes it and each closure is its direct requirements plus their closures. An edge
    pointing forward in `order` is a cycle; then each closure is searched on its own.
    """
    position = {c.uuid: i for i, c in enumerate(order)}
    acyclic = all(position[d] < position[u] for u, ds in edges.items() for d in ds)
    closure = {}
    for candidate in order:
        uuid = candidate.uuid
        if acyclic:
            reach = set(edges[uuid])
            for d in edges[uuid]:
                reach |= closure[d]
        else:
            reach, todo = set(), list(edges[uuid])
            while todo:
                d = todo.pop()
                if d not in reach:
                    reach.add(d)
                    todo.extend(edges[d])
            reach.discard(uuid)
        closure[uuid] = reach
    return [(c.uuid, d) for c in order
            for d in sorted(closure[c.uuid], key=position.__getitem__)]
