"""The CLI's module layout and its documents: what a reader relies on without running anything."""

import argparse
import ast
import io
import re
import shlex
from pathlib import Path

from appliance.cli.main import Environment, build_parser, parse_arguments

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "appliance" / "cli"


def imported_modules(path):
    """The modules of appliance.cli that `path` imports, by their short names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # from . import x / from .x import y
                names.update([module] if module else [alias.name for alias in node.names])
            elif module.startswith("appliance.cli."):
                names.add(module.rsplit(".", 1)[1])
            elif module == "appliance.cli":
                names.update(alias.name for alias in node.names)
    return names


def test_no_command_module_imports_main():
    """main imports the command modules; they share helpers through common, never main."""
    for path in CLI.glob("*.py"):
        if path.name != "main.py":
            assert "main" not in imported_modules(path), path.name


def test_the_cli_modules_import_no_cycle():
    graph = {path.stem: imported_modules(path) & {p.stem for p in CLI.glob("*.py")}
             for path in CLI.glob("*.py") if path.stem != "__init__"}

    def reaches(start, target, seen=()):
        return any(nxt == target or (nxt not in seen and reaches(nxt, target, (*seen, nxt)))
                   for nxt in graph.get(start, ()))

    assert [name for name in graph if reaches(name, name)] == []


def test_docs_name_only_files_of_the_repository():
    """docs/cli.md and the README point at files a reader of the repository can open."""
    for doc in (ROOT / "docs" / "cli.md", ROOT / "README.md"):
        text = doc.read_text()
        assert "/work/" not in text, doc.name
        for path in re.findall(r"`((?:docs|tests|appliance|examples)/[\w./-]+\.(?:md|py|yaml))`", text):
            assert (ROOT / path).exists(), (doc.name, path)


def test_readme_opening_claims_only_what_exists():
    """Every capability the opening names is here: issues 13 to 16 landed the last ones, so
    nothing is left marked as planned."""
    opening = (ROOT / "README.md").read_text().split("## ", 1)[0]
    assert "planned" not in opening.lower()
    for feature in ("virtual machines", "load balancers", "certificates", "configs",
                    "services", "postgresql"):
        assert feature in opening.lower(), feature


def every_parser(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from every_parser(sub)


def test_every_help_example_is_a_valid_command_line(tmp_path):
    """Each `example:` in a --help parses as the command it documents: right words, right order."""
    env = Environment(stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(),
                      config_dir=tmp_path, environ={}, transport=None, getpass=input)
    top = build_parser(env)
    checked = 0
    for parser in every_parser(top):
        epilog = parser.epilog or ""
        lines = epilog.split("example:\n", 1)[1].split("\n\n", 1)[0].splitlines() if "example:\n" in epilog else []
        for line in lines:
            words = [w for w in shlex.split(line.split("|", 1)[0]) if not re.match(r"^[A-Z_]+=", w)]
            assert words[0] == "appliance", line
            if words[1] == "up" or "--help" in words:
                continue  # everything after `up` is the supervisor's; --help prints and stops
            command = parser.prog.split()[1:]
            assert words[1:1 + len(command)] == command, (parser.prog, line)
            parsed = parse_arguments(top, words[1:])
            assert callable(parsed.handler), line
            checked += 1
    assert checked > 50
