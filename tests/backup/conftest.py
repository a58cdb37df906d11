"""Helpers of the backup and migration tests: the CLI run in-process through program()
and as a subprocess, and the state directory's bytes, to show that nothing changed."""

import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

from appliance.cli.main import Environment, program

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def clean_environ(**extra):
    """The process environment without APPLIANCE_* (a developer's settings must not leak
    in), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    return {**env, **extra}


def cli(*argv, environ=None):
    """`appliance ARGV` through program(), with no terminal and no home directory."""
    stdout, stderr = io.StringIO(), io.StringIO()
    env = Environment(stdin=io.StringIO(), stdout=stdout, stderr=stderr,
                      config_dir=Path("/nonexistent"), environ=environ or {},
                      transport=None, getpass=None)
    code = program(list(argv), env)
    return Result(code, stdout.getvalue(), stderr.getvalue())


def cli_process(*argv, environ=None, timeout=120):
    """`appliance ARGV` as a process of its own (what a user runs)."""
    done = subprocess.run([sys.executable, "-m", "appliance.cli.main", *argv], cwd=ROOT,
                          env=clean_environ(PYTHONPATH=ROOT, **(environ or {})),
                          capture_output=True, text=True, timeout=timeout)
    return Result(done.returncode, done.stdout, done.stderr)


def state_bytes(directory, with_locks=True):
    """{relative path: (mode, bytes)} of every file under `directory`. Lock files hold
    generation counters that move whenever a lock is taken: compare them only where no
    lock may have been taken at all. The change feed (`.feed/`) goes with them: it is a
    record of writes, not state, and a rolled-back change resets it (tests/state/
    test_feed.py checks that its readers are then sent to resync)."""
    found = {}
    for folder, dirs, files in os.walk(directory):
        rel = os.path.relpath(folder, directory)
        if not with_locks and rel.split(os.sep)[0] in (".locks", ".feed"):
            continue
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.normpath(os.path.join(rel, name))] = (
                    os.stat(path).st_mode & 0o7777, f.read())
        found[os.path.normpath(rel) + "/"] = (os.stat(folder).st_mode & 0o7777, b"")
    return found


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
