"""Where the run's time goes, by test directory: the suite has a time goal (issue 32:
under 30 minutes from a fresh clone), and `--durations` names only single tests, while
what costs is often a directory's shared set-up (a VM boot in a package fixture) spread
over its tests.

The terminal summary prints, for each directory under tests/, the wall time its tests'
set-up, call and tear-down took together, its share of the run and its test count,
longest first; docs/testing.md says what the figures were and what was done about them.
"""

import time
from collections import defaultdict

SHOWN = 12       # the directories printed; the rest are summed in one line

_spent = defaultdict(float)
_tests = defaultdict(set)
_started = None


def _directory(nodeid):
    # tests/<dir>/..., or a file at the top of tests/ for itself
    return "/".join(nodeid.split("::", 1)[0].split("/")[:2])


def pytest_sessionstart(session):
    global _started
    _started = time.monotonic()


def pytest_runtest_logreport(report):
    where = _directory(report.nodeid)
    _spent[where] += report.duration
    _tests[where].add(report.nodeid)


def lines(spent, tests, wall):
    ranked = sorted(spent.items(), key=lambda item: -item[1])
    out = [f"time by directory (set-up + call + tear-down; the run took {wall / 60:.1f} min):"]
    for where, seconds in ranked[:SHOWN]:
        out.append(f"  {seconds / 60:6.1f} min  {100 * seconds / wall:4.0f}%  "
                   f"{len(tests[where]):5d} tests  {where}")
    rest = ranked[SHOWN:]
    if rest:
        seconds = sum(s for _, s in rest)
        count = sum(len(tests[w]) for w, _ in rest)
        out.append(f"  {seconds / 60:6.1f} min  {100 * seconds / wall:4.0f}%  "
                   f"{count:5d} tests  {len(rest)} other directories")
    return out


def pytest_terminal_summary(terminalreporter):
    if _started is None or not _spent:
        return
    wall = max(time.monotonic() - _started, 1e-9)
    for line in lines(_spent, _tests, wall):
        terminalreporter.write_line(line)
