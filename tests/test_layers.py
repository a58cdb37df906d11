"""The floors of docs/architecture.md, held by the code's own imports.

The floors are written once, in the ```floors block of docs/architecture.md; this test reads
them and every import of appliance/, daemons/ and state/ (module level or inside a function,
and `try: import ... except ImportError` too: an optional import is still an arrow a reader
must follow, and the module it names still has to be there for the feature to work).

It fails on an import from a lower floor to a higher one, on a cycle between packages (only
possible between packages of one floor once upward arrows are counted apart), and on a cycle
between the modules of one package. Issue 28 removes the violations the code has today; they
are listed below, each with the move that removes it. A violation not in a list fails, and so
does a listed one that is gone: the lists only shrink.
"""

import pytest

from tests.house_counts import ROOT, arrows, cycles, read_floors, read_imports

# (importing file, imported module): an import from a lower floor to a higher one.
KNOWN_UPWARD = {}

# (package, package): the arrow, between two packages of one floor, that closes a cycle.
KNOWN_CYCLES = {
}

# (module, module): the import that closes a cycle inside one package.
KNOWN_INNER_CYCLES = {
}


@pytest.fixture(scope="module")
def house():
    rooms = read_floors()
    found, homeless = arrows(rooms)
    return rooms, found, homeless


def test_every_module_has_one_floor(house):
    rooms, _, homeless = house
    assert not homeless, (
        "these modules are on no floor; add them to the ```floors block of "
        f"docs/architecture.md (and its table): {', '.join(homeless)}")
    missing = [r.path for r in rooms if not (ROOT / r.path).exists()]
    assert not missing, f"the floors block names what does not exist: {', '.join(missing)}"
    paths = [r.path for r in rooms]
    twice = sorted({p for p in paths if paths.count(p) > 1})
    assert not twice, f"the floors block names these on more than one line: {', '.join(twice)}"


def test_the_floor_table_agrees_with_the_block(house):
    """The table is for reading and the block for this test: a room moved in one and not in
    the other would leave the document saying two things."""
    rooms, _, _ = house
    floor = {r.path: r.floor for r in rooms}
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The floors, bottom first", 1)[1].split("```floors", 1)[0]
    wrong = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        for path in (p for p in cells[1].split("`")[1::2] if "<" not in p):
            if floor.get(path) != int(cells[0]):
                wrong.append(f"{path} (table {cells[0]}, block {floor.get(path)})")
    assert not wrong, "docs/architecture.md's floor table and block disagree: " + ", ".join(wrong)


def test_no_import_runs_upward(house):
    _, found, _ = house
    upward = [a for a in found if a.upward]
    new = [a.describe() for a in upward if (a.site.file, a.site.imported) not in KNOWN_UPWARD]
    assert not new, ("imports from a lower floor to a higher one (move the shared part down, "
                     "or the room up in docs/architecture.md):\n  " + "\n  ".join(new))
    seen = {(a.site.file, a.site.imported) for a in upward}
    gone = [f"{f} -> {m}" for f, m in KNOWN_UPWARD if (f, m) not in seen]
    assert not gone, ("these upward imports are gone: remove them from KNOWN_UPWARD in "
                      "tests/test_layers.py:\n  " + "\n  ".join(gone))


def test_no_cycle_between_packages(house):
    _, found, _ = house
    level = [a for a in found if a.source != a.target and not a.upward]
    edges = {(a.source.path, a.target.path) for a in level}
    left = cycles(edges - set(KNOWN_CYCLES))
    if left:
        lines = []
        for part in left:
            lines.append(" <-> ".join(sorted(part)) + ", through:")
            lines += sorted({f"    {a.describe()}" for a in level
                             if a.source.path in part and a.target.path in part
                             and (a.source.path, a.target.path) not in KNOWN_CYCLES})
        pytest.fail("cycles between packages (packages of one floor import each other one "
                    "way only):\n  " + "\n  ".join(lines))
    parts = cycles(edges)
    gone = [f"{a} -> {b}" for a, b in KNOWN_CYCLES
            if (a, b) not in edges or not any({a, b} <= part for part in parts)]
    assert not gone, ("these arrows no longer close a cycle: remove them from KNOWN_CYCLES in "
                      "tests/test_layers.py:\n  " + "\n  ".join(gone))


def test_no_cycle_inside_a_package(house):
    rooms, found, _ = house
    new, edges_all, parts_all = [], set(), []
    for room in rooms:
        inside = [a for a in found if a.source == a.target == room]
        edges = {(a.site.importer, a.site.imported) for a in inside}
        edges_all |= edges
        parts_all += cycles(edges)
        for part in cycles(edges - set(KNOWN_INNER_CYCLES)):
            new.append(" <-> ".join(sorted(part)) + ", through: " + "; ".join(sorted(
                f"{a.site.file}:{a.site.line} imports {a.site.imported}" for a in inside
                if a.site.importer in part and a.site.imported in part
                and (a.site.importer, a.site.imported) not in KNOWN_INNER_CYCLES)))
    assert not new, "cycles inside one package:\n  " + "\n  ".join(new)
    gone = [f"{a} -> {b}" for a, b in KNOWN_INNER_CYCLES
            if (a, b) not in edges_all or not any({a, b} <= part for part in parts_all)]
    assert not gone, ("these imports no longer close a cycle: remove them from "
                      "KNOWN_INNER_CYCLES in tests/test_layers.py:\n  " + "\n  ".join(gone))


def test_the_reader_sees_every_kind_of_import(tmp_path):
    """The lists above prove the reader on today's code; this proves it on a made-up
    package, so that it still holds once the lists are empty."""
    package = tmp_path / "appliance" / "cap"
    package.mkdir(parents=True)
    (tmp_path / "appliance" / "__init__.py").write_text("")
    (tmp_path / "appliance" / "other.py").write_text("")
    (package / "__init__.py").write_text("from .rules import X\n")
    (package / "rules.py").write_text("X = 1\n")
    (package / "late.py").write_text(
        "def f():\n    from appliance import other\n"
        "try:\n    import appliance.other\nexcept ImportError:\n    pass\n"
        "from . import rules\n"
        "import importlib\nimportlib.import_module('appliance.cap.rules')\n")
    seen = sorted((i.importer, i.imported, i.line) for i in read_imports(root=tmp_path))
    assert seen == [("appliance.cap", "appliance.cap.rules", 1),
                    ("appliance.cap.late", "appliance.cap.rules", 7),
                    ("appliance.cap.late", "appliance.cap.rules", 9),
                    ("appliance.cap.late", "appliance.other", 2),
                    ("appliance.cap.late", "appliance.other", 4)]


def test_cycles_and_floors_are_read_as_written():
    assert sorted(map(sorted, cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}))) \
        == [["a", "b", "c"]]
    assert cycles({("a", "b"), ("b", "c")}) == []
    rooms = read_floors("```floors\n2 api: appliance/api/  # comment\n1 store: state/\n```\n")
    assert [(r.floor, r.group, r.path) for r in rooms] == [(1, "store", "state/"),
                                                          (2, "api", "appliance/api/")]
    with pytest.raises(ValueError, match="not '<floor> <group>: <paths>'"):
        read_floors("```floors\nstate/\n```\n")
