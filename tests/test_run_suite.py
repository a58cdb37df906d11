"""tests/run_suite.py: the runs' lines reach the log behind their names, and the suite
passes only when every run does."""

import io
import sys

from tests import run_suite
from tests.run_suite import IMAGE_TESTS


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
                f"raise SystemExit({code})"]
    monkeypatch.setattr(run_suite, "command", command)
    monkeypatch.setattr(run_suite.signal, "signal", lambda *a: None)
    out = io.BytesIO()
    assert run_suite.program([], out) == 1
    lines = out.getvalue().decode().splitlines()
    assert f"image| first of image -m slow {IMAGE_TESTS}" in lines
    assert f"  vms| first of vms -m slow --ignore={IMAGE_TESTS}" in lines
    assert "quick| first of quick -m not slow" in lines
    assert lines.index("image| first of image -m slow tests/image") < \
        lines.index("image| second of image")
    assert lines[-1].startswith("suite: ")
    assert "image exit 1 after" in lines[-1] and "vms exit 0 after" in lines[-1] \
        and "quick exit 0 after" in lines[-1]

