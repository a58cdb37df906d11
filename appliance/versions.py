"""Element versions and requirement constraints, shared by the Element Manager and the Repo Proxy.

A version is MAJOR.MINOR.PATCH, optionally followed by a suffix (pre-release or development
part) and by build metadata after "+":

    1.2.3   1.2.3-rc.1   1.2.3-alpha   1.2.3.dev4   1.2.3dev4   1.2.3rc1   1.2.3+build.5

Ordering (spec 2.4 rule 2, 3.3 rules 5-6, 9.2):
  * by (major, minor, patch);
  * for the same triple a release (no suffix) is greater than any suffixed version;
  * two suffixes compare semver-style by identifiers: the suffix is split on "." and "-"
    and between letters and digits ("rc10" -> "rc", 10); numbers compare numerically,
    words lexically (ignoring case), a number is less than a word, and when all shared
    identifiers are equal the longer list is greater;
  * build metadata is ignored.

Requirements map from_version to >=, to_version to < and version to ==. See docs/versions.md.
"""

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "VersionError", "ConstraintFormatError", "Version", "parse", "Constraint",
    "parse_constraint", "constraints_from_requirement", "satisfies", "describe",
    "OPERATORS", "REQUIREMENT_KEYS",
]


class VersionError(ValueError):
    """Text that is not a version."""


class ConstraintFormatError(ValueError):
    """A constraint that cannot be built: unknown operator or key, or a bad version in it."""


_NUM = r"0|[1-9][0-9]*"               # no leading zeros: one spelling per number
_IDENTS = r"[0-9A-Za-z]+(?:[.-][0-9A-Za-z]+)*"
_VERSION_RE = re.compile(
    rf"""
    (?P<major>{_NUM})\.(?P<minor>{_NUM})\.(?P<patch>{_NUM})
    (?:
        -(?P<dashed>{_IDENTS})                       # 1.2.3-rc.1, 1.2.3-1
      | \.?(?P<attached>[A-Za-z][0-9A-Za-z]*(?:[.-][0-9A-Za-z]+)*)  # 1.2.3.dev4, 1.2.3rc1
    )?
    (?:\+(?P<build>{_IDENTS}))?                      # 1.2.3+build.5
    """,
    re.VERBOSE | re.ASCII,
)
_TOKEN_RE = re.compile(r"[0-9]+|[A-Za-z]+")


@functools.total_ordering
class Version:
    """A parsed version. Equality and ordering follow precedence; str() is the original text.

    Two spellings of the same precedence are equal ("1.2.3rc1" == "1.2.3-rc.1",
    "1.2.3+a" == "1.2.3"); use str(v) where the exact text matters (record identity).
    """

    __slots__ = ("text", "major", "minor", "patch", "suffix", "build", "_key")

    def __init__(self, text):
        if not isinstance(text, str):
            raise VersionError(f"invalid version {text!r}: not a string")
        match = _VERSION_RE.fullmatch(text)
        if match is None:
            raise VersionError(
                f"invalid version {text!r}: expected MAJOR.MINOR.PATCH with an optional "
                f"suffix and +build, like 1.2.3, 1.2.3-rc.1, 1.2.3.dev4")
        self.text = text
        self.major, self.minor, self.patch = (int(match[k]) for k in ("major", "minor", "patch"))
        self.suffix = match["dashed"] or match["attached"]      # None for a release
        self.build = match["build"]
        suffix_key = tuple(
            (0, int(token)) if token.isdigit() else (1, token.lower())
            for token in _TOKEN_RE.findall(self.suffix or ""))
        # A release sorts after every suffixed version of its triple: flag 1 beats flag 0.
        self._key = (self.major, self.minor, self.patch, 0 if self.suffix else 1, suffix_key)

    @property
    def is_dev(self) -> bool:
        """True for a development / pre-release version (one with a suffix)."""
        return self.suffix is not None

    @property
    def is_release(self) -> bool:
        return self.suffix is None

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key == other._key

    def __lt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key < other._key

    def __hash__(self):
        return hash(self._key)

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"Version({self.text!r})"


def parse(text) -> Version:
    """Parse a version; a Version is returned as is. Raises VersionError."""
    return text if isinstance(text, Version) else Version(text)


OPERATORS = {
    "==": lambda a, b: a == b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}

# Manifest requirement keys, in the order describe() shows them.
REQUIREMENT_KEYS = {"from_version": ">=", "to_version": "<", "version": "=="}


@dataclass(frozen=True)
class Constraint:
    """One comparison, e.g. Constraint(">=", "1.0.0"). The version may be text or a Version."""

    op: str
    version: Version

    def __post_init__(self):
        if self.op not in OPERATORS:
            raise ConstraintFormatError(
                f"unknown operator {self.op!r}: use one of {', '.join(OPERATORS)}")
        try:
            object.__setattr__(self, "version", parse(self.version))
        except VersionError as exc:
            raise ConstraintFormatError(f"constraint {self.op}{self.version}: {exc}") from exc

    def matches(self, version) -> bool:
        return OPERATORS[self.op](parse(version), self.version)

    def __str__(self):
        return f"{self.op}{self.version}"


_CONSTRAINT_RE = re.compile(r"\s*([<>=!~^]*)\s*(.*?)\s*", re.DOTALL)


def parse_constraint(text: str) -> Constraint:
    """Parse "<op><version>", e.g. ">=1.0.0" or "< 2.0.0". Raises ConstraintFormatError."""
    if not isinstance(text, str):
        raise ConstraintFormatError(f"invalid constraint {text!r}: not a string")
    op, version = _CONSTRAINT_RE.fullmatch(text).groups()
    if not op:
        raise ConstraintFormatError(
            f"invalid constraint {text!r}: missing operator (one of {', '.join(OPERATORS)})")
    return Constraint(op, version)


def constraints_from_requirement(requirement: Mapping) -> list:
    """Constraints of one manifest requirement: {"from_version": "0.0.0", "to_version": "1.0.0"}.

    from_version -> >=, to_version -> <, version -> ==. An empty mapping (or None) means
    any version and gives []. Unknown keys and non-string values raise ConstraintFormatError.
    """
    if requirement is None:
        return []
    if not isinstance(requirement, Mapping):
        raise ConstraintFormatError(
            f"invalid requirement {requirement!r}: expected a mapping of "
            f"{', '.join(REQUIREMENT_KEYS)}")
    unknown = [key for key in requirement if key not in REQUIREMENT_KEYS]
    if unknown:
        raise ConstraintFormatError(
            f"unknown requirement key {unknown[0]!r}: use {', '.join(REQUIREMENT_KEYS)}")
    constraints = []
    for key, op in REQUIREMENT_KEYS.items():
        if key not in requirement:
            continue
        value = requirement[key]
        if not isinstance(value, str):
            raise ConstraintFormatError(
                f"requirement key {key!r}: version must be a string, got {value!r}")
        try:
            constraints.append(Constraint(op, parse(value)))
        except VersionError as exc:
            raise ConstraintFormatError(f"requirement key {key!r}: {exc}") from exc
    return constraints


def satisfies(version, constraints: Iterable) -> bool:
    """True when the version meets every constraint (no constraints: any version)."""
    version = parse(version)
    return all(constraint.matches(version) for constraint in constraints)


def describe(constraints: Iterable) -> str:
    """Constraints for messages: ">=0.0.0, <1.0.0"; "any version" when there are none."""
    return ", ".join(str(c) for c in constraints) or "any version"
