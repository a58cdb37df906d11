"""Measure the house: `python -m tests.house_counts` (or `make house`).

Issue 28 reshapes the code without changing what it does, and its goals are numbers: the
files outside a capability that name it, the writers of files on the node side, the longest
rooms of compute and the DNS mirror, and the import arrows between floors. Measured by hand
they drift; this prints them from the code, so "before" and "after" are the same measure.
tests/test_layers.py reads the imports through the same functions, and the floors from the
one place they are written, the `floors` block of docs/architecture.md.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("appliance", "daemons", "state")
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LONG = 60  # issue 28's goal: no function or class of compute or the DNS mirror over this


# --- floors -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Room:
    """One line's package or top-level module: `path` ends in "/" for a folder."""
    path: str
    floor: int
    group: str


def read_floors(text: str | None = None) -> list[Room]:
    """The rooms of the ```floors block of docs/architecture.md, bottom first."""
    text = ARCHITECTURE.read_text() if text is None else text
    block = re.search(r"^```floors\n(.*?)^```", text, re.S | re.M)
    if not block:
        raise ValueError(f"{ARCHITECTURE}: no ```floors block (see its 'The floors' section)")
    rooms = []
    for number, line in enumerate(block.group(1).splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"(\d+)\s+([^:]+):\s*(.+)", line)
        if not match:
            raise ValueError(f"floors block line {number}: {line!r} is not "
                             "'<floor> <group>: <paths>'")
        rooms += [Room(path, int(match.group(1)), match.group(2).strip())
                  for path in match.group(3).split()]
    return sorted(rooms, key=lambda room: (room.floor, room.path))


def room_of(relpath: str, rooms: list[Room]) -> Room | None:
    """The room a source file belongs to: its own line, else the deepest folder holding it."""
    best = None
    for room in rooms:
        if relpath == room.path or (room.path.endswith("/") and relpath.startswith(room.path)):
            if best is None or len(room.path) > len(best.path):
                best = room
    return best


# --- imports ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Import:
    """One import statement (or import_module("...") call) between two of our modules."""
    file: str  # the importing file, relative to the repository
    line: int
    importer: str  # dotted module names
    imported: str


def source_modules(root: Path = ROOT) -> dict[str, str]:
    """Every module of appliance/, daemons/ and state/: dotted name -> relative path."""
    modules = {}
    for top in SOURCE_DIRS:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            name = rel[:-3].replace("/", ".")
            modules[name.removesuffix(".__init__")] = rel
    return modules


def _called(call: ast.Call) -> str:
    return getattr(call.func, "attr", getattr(call.func, "id", ""))


def _ours(name: str, modules: dict[str, str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def read_imports(modules: dict[str, str] | None = None, root: Path = ROOT) -> list[Import]:
    """Every import between our modules: module level or inside a function, optional ones
    (try/except ImportError) included, since each is an arrow the reader must follow."""
    modules = source_modules(root) if modules is None else modules
    found = []
    for name, rel in modules.items():
        package = name if rel.endswith("__init__.py") else name.rpartition(".")[0]
        for node in ast.walk(ast.parse((root / rel).read_text(), rel)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module
                # `from x import y` imports the module x.y when there is one, else x itself
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules
                           else source for alias in node.names]
            elif (isinstance(node, ast.Call) and _called(node) == "import_module" and node.args
                  and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)):
                targets = [node.args[0].value]
            for target in dict.fromkeys(targets):  # `from x import a, b`: one arrow to x
                imported = _ours(target, modules)
                if imported and imported != name:
                    found.append(Import(rel, node.lineno, name, imported))
    return found


@dataclass(frozen=True)
class Arrow:
    """An import seen from the floors: the rooms at both ends."""
    site: Import
    source: Room
    target: Room

    @property
    def upward(self) -> bool:
        return self.source.floor < self.target.floor

    def describe(self) -> str:
        return (f"{self.site.file}:{self.site.line} imports {self.site.imported} "
                f"(floor {self.source.floor} {self.source.group}, {self.source.path} -> "
                f"floor {self.target.floor} {self.target.group}, {self.target.path})")


def arrows(rooms: list[Room] | None = None) -> tuple[list[Arrow], list[str]]:
    """The imports between rooms, and the files no room holds."""
    rooms = read_floors() if rooms is None else rooms
    modules = source_modules()
    homeless = sorted(rel for rel in modules.values() if room_of(rel, rooms) is None)
    found = []
    for site in read_imports(modules):
        source, target = room_of(site.file, rooms), room_of(modules[site.imported], rooms)
        if source and target:
            found.append(Arrow(site, source, target))
    return found, homeless


def cycles(edges: set[tuple[str, str]]) -> list[set[str]]:
    """The strongly connected parts (more than one node) of a directed graph (Tarjan)."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on_stack, parts = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.add(member)
                if member == node:
                    break
            if len(part) > 1:
                parts.append(part)

    for node in sorted(set(graph) | {b for _, b in edges}):
        if node not in index:
            visit(node)
    return parts


# --- counts -------------------------------------------------------------------------------

def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
        return [f for f in out.splitlines() if (ROOT / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()
                and ".git" not in p.parts and ".venv" not in p.parts]


IMPORT, STRING = "import", "string"


def _words_of_python(text: str) -> tuple[set[tuple[str, str]], list[set[str]]]:
    """What code says of other packages: (word, how) for the modules it imports (IMPORT)
    and its one-word strings (STRING: "sqldb", "lb-set", "appliance.sqldb.targets:produce";
    not a logger's name), and the one-word strings of each tuple, list, set or dict literal
    (a table). Names, comments, docstrings and prose strings are left out, or "network" and
    "service" would count in nearly every file."""
    words, tables = set(), []
    tree = ast.parse(text)
    loggers = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
               and _called(node) == "getLogger" for arg in node.args}

    def one_word(node):
        return isinstance(node, ast.Constant) and isinstance(node.value, str) \
            and re.fullmatch(r"[\w.:/-]+", node.value) is not None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            words.update((alias.name, IMPORT) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            words.update((f"{node.module}.{alias.name}", IMPORT) for alias in node.names)
        elif one_word(node) and id(node) not in loggers:
            words.add((node.value, STRING))
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            tables.append({item.value for item in items if item is not None and one_word(item)})
    return words, tables


def _names(word: str, capability: str) -> bool:
    # a word or the part of one: sqldb_port, appliance.sqldb, "sqldb:" (not appliance.sqldbx)
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(capability)}(?![A-Za-z0-9])", word) is not None


def _references(word: str, capability: str) -> bool:
    """A string naming the capability's code: "appliance.sqldb.targets:for_node" (a
    descriptor's kind of reference) or "appliance.sqldb.auth" (a module to import)."""
    return re.fullmatch(rf"appliance\.{re.escape(capability)}(\.\w+)*(:\w+)?", word) is not None


WIRING, USE, SHELL, CLI = "wiring", "use", "shell", "cli"
WHAT = {
    WIRING: "registers or lists it: a table of capability names, a string naming its code "
            "(\"appliance.<name>.<module>[:<attribute>]\"), a unit or image file; the goal: "
            "the one list, plus docs",
    USE: "imports its modules, or reads its records, settings or permissions "
         "(lb using secret's crypto): legitimate",
    SHELL: "daemons/<name>.py, the process shell of one of its daemons (python -m): one per "
           "daemon by design",
    CLI: "appliance/cli/ command groups, which name their capability by design",
}


def files_naming(capabilities: list[str]) -> dict[str, dict[str, list[str]]]:
    """For each capability, the files outside its package that name it (Python files by
    import or one-word string; other files, units and the image recipe, by
    "appliance-<name>", "appliance.<name>" or "appliance/<name>"), sorted by what they are
    (WHAT). A table counts as wiring when at least two capabilities (besides its own file's)
    make at least half of its strings: a dict of fields that holds two ("network", "dns",
    among "gateway", "mask"...) does not list capabilities. docs/, tests/, examples/, *.md and the CLI's generated create_fields.json
    are left out: they describe, they do not register."""
    named = {c: {what: [] for what in WHAT} for c in capabilities}
    for rel in _tracked_files():
        if rel.startswith(("docs/", "tests/", "examples/", ".")) or rel.endswith(".md") \
                or rel == "appliance/cli/create_fields.json":
            continue
        try:
            text = (ROOT / rel).read_text()
        except (UnicodeDecodeError, OSError):
            continue
        own = rel.split("/")[1] if rel.startswith("appliance/") else None
        tables = []
        if rel.endswith(".py"):
            words, tables = _words_of_python(text)
        else:
            code = "\n".join([Path(rel).name] + [line for line in text.splitlines()
                                                  if not line.lstrip().startswith("#")])
            found = set(re.findall(r"appliance[-./][\w-]+", code))
            words = {(w.split("appliance", 1)[1][1:], STRING) for w in found}
        listing = [t for t in tables if len(t & set(capabilities) - {own}) >= 2
                   and 2 * len(t & set(capabilities)) >= len(t)]
        for capability in capabilities:
            if own == capability:
                continue
            naming = [(w, how) for w, how in words if _names(w, capability)]
            if not naming:
                continue
            if rel.startswith("appliance/cli/"):
                what = CLI
            elif rel.startswith("daemons/") and rel not in ("daemons/__init__.py",
                                                            "daemons/base.py"):
                what = SHELL
            elif not rel.endswith(".py") or any(capability in t for t in listing) or any(
                    how == STRING and _references(w, capability) for w, how in naming):
                what = WIRING
            else:
                what = USE
            named[capability][what].append(rel)
    return named


def node_side_files() -> list[str]:
    """The modules that run on a node: the agent's process and runner, every node driver,
    first boot and the one file writer, and the modules of their own packages they import
    (sqldb/pg.py, lb/nginx.py...); resources and producers are the API's, not the node's."""
    modules = source_modules()
    api_side = ("resources.py", "targets.py", "capabilities.py", "poll.py", "status.py")
    start = {m for m, f in modules.items() if f.endswith("/node.py") or f in (
        "appliance/files.py", "daemons/agent.py", "appliance/agent/runner.py",
        "appliance/agent/host.py", "appliance/agent/client.py")
        or f.startswith("appliance/firstboot/")}
    by_importer = defaultdict(set)
    for site in read_imports(modules):
        by_importer[site.importer].add(site.imported)
    seen, todo = set(start), list(start)
    while todo:
        for imported in by_importer[todo.pop()]:
            same_package = imported.rpartition(".")[0] in {m.rpartition(".")[0] for m in seen}
            if imported not in seen and same_package and not modules[imported].endswith(api_side):
                seen.add(imported)
                todo.append(imported)
    return sorted(modules[m] for m in seen)


_WRITE_CALLS = {"replace", "rename", "write_text", "write_bytes", "mkstemp", "NamedTemporaryFile"}


def _writes(call: ast.Call) -> bool:
    name = _called(call)
    owner = getattr(getattr(call.func, "value", None), "id", "")
    if name in ("replace", "rename"):  # str.replace is not a file's: os.replace, or a path's
        return owner == "os" or (owner != "" and owner not in ("str", "text", "line", "value")
                                 and len(call.args) == 1 and not call.keywords)
    if name in _WRITE_CALLS:
        return True
    if name == "open" and owner in ("", "io", "builtins"):
        mode = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) \
            and any(c in mode.value for c in "wax+")
    if name == "open" and owner == "os":
        return any(getattr(n, "attr", "") in ("O_WRONLY", "O_RDWR", "O_CREAT")
                   for arg in call.args[1:2] for n in ast.walk(arg))
    return False


def file_writers(files: list[str]) -> list[str]:
    """The functions of `files` that open a file for writing, or replace/rename one."""
    found = []
    for rel in files:
        tree = ast.parse((ROOT / rel).read_text(), rel)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own = [n for n in ast.walk(node) if isinstance(n, ast.Call) and _writes(n)
                       and not any(n in ast.walk(inner) for inner in node.body
                                   if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)))]
                if own:
                    found.append(f"{rel}:{node.lineno} {node.name}")
    return found


# Node-side writers that do not replace a whole file, each with what it does instead; the
# goal of one file writer (appliance/files.py) is about whole files. A writer not listed
# here counts as a whole-file writer, so a new one cannot hide; one listed but gone fails
# the report (`stale`).
NOT_WHOLE_FILE = {
    "appliance/lb/node.py unpack_url":
        "directory swap: a downloaded tree, unpacked aside, renamed into place",
    "appliance/lb/node.py _untar":
        "stream: a tarball's members into that fresh private directory (O_EXCL, O_NOFOLLOW)",
    "appliance/lb/node.py _point_current":
        "symlink swap: the `current` link to an nginx configuration's generation",
    "appliance/sqldb/node.py _copy_anew":
        "directory swap: a member's data directory set aside for a new base backup",
    "appliance/sqldb/pg.py initdb":
        "directory swap: a new cluster, made aside and renamed into place",
    "appliance/sqldb/pg.py basebackup":
        "directory swap: a base backup, made aside and renamed into place",
    "appliance/firstboot/banner.py show":
        "stream: the banner to the console device (its issue file: files.write_file)",
}


def sort_writers(writers: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(whole-file writers, others with what they do, NOT_WHOLE_FILE entries now gone)."""
    whole, other, seen = [], [], set()
    for writer in writers:
        where, name = writer.split(" ", 1)
        key = f"{where.rsplit(':', 1)[0]} {name}"
        if key in NOT_WHOLE_FILE:
            seen.add(key)
            other.append(f"{writer}: {NOT_WHOLE_FILE[key]}")
        else:
            whole.append(writer)
    return whole, other, sorted(set(NOT_WHOLE_FILE) - seen)


def longest(paths: list[str], top: int = 12) -> list[tuple[int, str]]:
    """The longest functions and classes (lines, decorators excluded) under `paths`."""
    sized = []
    for base in paths:
        target = ROOT / base
        for path in sorted(target.rglob("*.py") if target.is_dir() else [target]):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(), rel)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    kind = "class" if isinstance(node, ast.ClassDef) else "def"
                    sized.append((node.end_lineno - node.lineno + 1,
                                  f"{rel}:{node.lineno} {kind} {node.name}"))
    return sorted(sized, key=lambda s: (-s[0], s[1]))[:top] if top else sorted(sized, reverse=True)


# --- the report ---------------------------------------------------------------------------

def report(verbose: bool = False) -> None:
    rooms = read_floors()
    found, homeless = arrows(rooms)
    head = subprocess.run(["git", "log", "-1", "--format=%h %cs"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    print(f"house counts at {head or 'an unknown commit'}")

    capabilities = [r.path.split("/")[1] for r in rooms if r.group == "capabilities"]
    named = files_naming(capabilities)
    print("\n1. files outside a capability's package that name it (by import or one-word string; "
          "units and image files by appliance-<name>), by what they are:")
    for what, says in WHAT.items():
        print(f"   {what + ':':7} {says}")
    print(f"   {'':9} {'all':>4} " + " ".join(f"{what:>6}" for what in WHAT))
    totals = defaultdict(set)
    for capability, by in sorted(named.items(), key=lambda kv: -sum(map(len, kv[1].values()))):
        print(f"   {capability:9} {sum(map(len, by.values())):4} "
              + " ".join(f"{len(by[what]):6}" for what in WHAT))
        for what in WHAT:
            totals[what].update(by[what])
            if verbose and by[what]:
                print(f"      {what}: {' '.join(by[what])}")
    print(f"   wiring files: {len(totals[WIRING])}"
          + (f"  {' '.join(sorted(totals[WIRING]))}" if verbose else ""))

    whole, other, stale = sort_writers(file_writers(node_side_files()))
    print(f"\n2. node-side writers (functions that open for writing, replace or rename): "
          f"{len(whole) + len(other)}")
    print(f"   whole-file writers (goal: 1, appliance/files.py): {len(whole)}")
    for writer in whole:
        print(f"     {writer}")
    print(f"   directory and symlink swaps, streams (tests/house_counts.py NOT_WHOLE_FILE): "
          f"{len(other)}")
    for writer in other:
        print(f"     {writer}")
    for gone in stale:
        print(f"   gone, remove it from NOT_WHOLE_FILE: {gone}")

    print(f"\n3. longest functions and classes in appliance/compute/ and appliance/dns/mirror.py "
          f"(goal: none over {LONG} lines)")
    every = longest(["appliance/compute", "appliance/dns/mirror.py"], top=0)
    print(f"   over {LONG} lines: {sum(1 for n, _ in every if n > LONG)}")
    for lines, where in every[:12]:
        print(f"   {lines:4}  {where}")

    room_edges = {(a.source.path, a.target.path) for a in found if a.source != a.target}
    upward = [a for a in found if a.upward]
    level = {(a.source.path, a.target.path) for a in found if a.source != a.target and not a.upward}
    print(f"\n4. imports: {len(rooms)} rooms on {len({r.floor for r in rooms})} floors, "
          f"{len(room_edges)} arrows between rooms "
          f"({sum(1 for a in found if a.source != a.target)} import statements)")
    print(f"   upward arrows: {len({(a.source.path, a.target.path) for a in upward})} "
          f"({len(upward)} statements)")
    for arrow in upward:
        print(f"     {arrow.describe()}")
    print(f"   cycles between packages on one floor: {len(cycles(level))}")
    for part in cycles(level):
        print(f"     {' <-> '.join(sorted(part))}")
    inner = set()
    for room in rooms:
        edges = {(a.site.importer, a.site.imported) for a in found
                 if a.source == a.target == room and a.site.importer != a.site.imported}
        inner.update(" <-> ".join(sorted(part)) for part in cycles(edges))
    print(f"   cycles inside one package: {len(inner)}")
    for part in sorted(inner):
        print(f"     {part}")
    if homeless:
        print(f"   modules no floor names: {' '.join(homeless)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.house_counts",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="list the files behind each count")
    report(parser.parse_args(argv).verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
