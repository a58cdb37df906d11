"""tests/run_suite.py: the two runs' lines reach the log behind their names, and the suite
passes only when both runs do."""

import io
import sys

from tests import run_suite


def test_the_verdict_is_the_first_failing_runs_status():
    assert run_suite.verdict([0, 0]) == 0
    assert run_suite.verdict([5, 0]) == 0          # an empty selection passes
    assert run_suite.verdict([0, 1]) == 1
    assert run_suite.verdict([2, 1]) == 2


def test_both_runs_are_relayed_and_a_failing_one_fails_the_suite(monkeypatch):
    def command(marker, verbosity, extra):
        code = 1 if marker == "slow" else 0
        return [sys.executable, "-c",
                f"print('first of {marker}'); print('second of {marker}'); raise SystemExit({code})"]
    monkeypatch.setattr(run_suite, "command", command)
    monkeypatch.setattr(run_suite.signal, "signal", lambda *a: None)
    out = io.BytesIO()
    assert run_suite.program([], out) == 1
    lines = out.getvalue().decode().splitlines()
    assert " slow| first of slow" in lines and " slow| second of slow" in lines
    assert "quick| first of not slow" in lines and "quick| second of not slow" in lines
    assert lines.index(" slow| first of slow") < lines.index(" slow| second of slow")
    assert lines[-1].startswith("suite: ")
    assert "slow exit 1 after" in lines[-1] and "quick exit 0 after" in lines[-1]
