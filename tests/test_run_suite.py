"""tests/run_suite.py: the runs' lines reach the log behind their names, and the suite
passes only when every run does."""

import io
import os
import subprocess
import sys

from tests import run_suite
from tests.run_suite import IMAGE_TESTS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_verdict_is_the_first_failing_runs_status():
    assert run_suite.verdict([0, 0]) == 0
    assert run_suite.verdict([5, 0]) == 0          # an empty selection passes
    assert run_suite.verdict([0, 1]) == 1
    assert run_suite.verdict([2, 1]) == 2


def test_every_run_is_relayed_and_a_failing_one_fails_the_suite(monkeypatch):
    def command(selection, verbosity, extra):
        name = " ".join(selection)
        code = 1 if IMAGE_TESTS in selection else 0
        return [sys.executable, "-c",
                "import os; run = os.environ['APPLIANCE_SUITE_RUN']; "
                f"print('first of', run, {name!r}); print('second of', run); "
                "print('ERROR    appliance.x: a captured log line, not a summary'); "
                f"print('FAILED tests/x.py::test_y - boom') if {code} else None; "
                f"raise SystemExit({code})"]
    monkeypatch.setattr(run_suite, "command", command)
    monkeypatch.setattr(run_suite.signal, "signal", lambda *a: None)
    out = io.BytesIO()
    assert run_suite.program([], out) == 1
    lines = out.getvalue().decode().splitlines()
    assert f"image| first of image -m slow {IMAGE_TESTS}" in lines
    assert f"  vms| first of vms -m slow --ignore={IMAGE_TESTS}" in lines
    assert "quick| first of quick -m not slow" in lines
    assert lines.index(f"image| first of image -m slow {IMAGE_TESTS}") < \
        lines.index("image| second of image")
    assert lines[-1].startswith("suite: ")
    # the failed test named again at the end, where a CI's tail shows it
    assert lines[-2] == "image! FAILED tests/x.py::test_y - boom"
    assert not [line for line in lines if line.startswith(("  vms!", "quick!"))]
    assert "image exit 1 after" in lines[-1] and "vms exit 0 after" in lines[-1] \
        and "quick exit 0 after" in lines[-1]


def test_a_run_started_with_sigint_ignored_still_gets_its_keyboardinterrupt():
    """Started in the background by a shell, the suite inherits SIGINT ignored; its pytest
    runs must not (stopped, such a run went on with its tests), so each run here reports
    whether SIGINT raises KeyboardInterrupt in it."""
    script = (
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "from tests import run_suite\n"
        "run_suite.command = lambda *a: [sys.executable, '-c', 'import signal; "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)']\n"
        "sys.exit(run_suite.program([], sys.stdout.buffer))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    answers = [line.split("| ")[1] for line in done.stdout.splitlines() if "| " in line]
    assert answers == ["True"] * len(run_suite.RUNS), done.stdout


def test_a_runs_recap_is_cut_at_recap_lines():
    summary = [f"FAILED tests/x.py::test_{i} - boom\n".encode()
               for i in range(run_suite.RECAP_LINES + 3)]
    lines = run_suite.recap({"quick": summary}).decode().splitlines()
    assert lines[0] == "quick! FAILED tests/x.py::test_0 - boom"
    assert len(lines) == run_suite.RECAP_LINES + 1
    assert lines[-1] == "quick! ... and 3 more"
    assert run_suite.recap({}) == b""
