"""Where the run's time goes, by test directory: the suite has a time goal (issue 32:
under 30 minutes from a fresh clone), and `--durations` names only single tests, while
what costs is often a directory's shared set-up (a VM boot in a package fixture) spread
over its tests.

The terminal summary prints, for each directory under tests/, the wall time its tests'
set-up, call and tear-down took together, its share of the run, its test count, and how
many of the machine's cores were busy on average meanwhile (from /proc/stat: on a quiet
machine, what a directory leaves idle is what running things beside it could use; on a
busy one the figure includes the rest of the load), longest first; docs/testing.md says
what the figures were and what was done about them.
"""

import os
import time
from collections import defaultdict

import pytest

SHOWN = 12       # the directories printed; the rest are summed in one line

_spent = defaultdict(float)
_tests = defaultdict(set)
_busy = {}      # directory -> (core-seconds busy, seconds) while its tests ran
_started = None
_TICK = os.sysconf("SC_CLK_TCK")


def _busy_seconds():
    """Core-seconds the machine's CPUs spent not idle since boot (None off Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)      # idle, iowait
    return (sum(fields[:8]) - idle) / _TICK


def _directory(nodeid):
    # tests/<dir>/..., or a file at the top of tests/ for itself
    return "/".join(nodeid.split("::", 1)[0].split("/")[:2])


def pytest_sessionstart(session):
    global _started
    _started = time.monotonic()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before, started = _busy_seconds(), time.monotonic()
    yield
    after = _busy_seconds()
    if before is not None and after is not None:
        where = _directory(item.nodeid)
        busy, seconds = _busy.get(where, (0.0, 0.0))
        _busy[where] = (busy + after - before, seconds + time.monotonic() - started)


def pytest_runtest_logreport(report):
    where = _directory(report.nodeid)
    _spent[where] += report.duration
    _tests[where].add(report.nodeid)


def lines(spent, tests, wall, busy=None):
    busy = busy or {}
    ranked = sorted(spent.items(), key=lambda item: -item[1])
    out = [f"time by directory (set-up + call + tear-down; cores busy on average meanwhile, "
           f"of {os.cpu_count()}; the run took {wall / 60:.1f} min):"]

    def line(seconds, cores, count, what):
        busy, during = cores or (0.0, 0.0)
        # /proc/stat counts in ticks (10 ms): a few short tests may read above the count
        shown = f"{min(busy / during, os.cpu_count()):5.1f}" if during else "    -"
        return (f"  {seconds / 60:6.1f} min  {100 * seconds / wall:4.0f}%  {shown} cores  "
                f"{count:5d} tests  {what}")
    for where, seconds in ranked[:SHOWN]:
        out.append(line(seconds, busy.get(where), len(tests[where]), where))
    rest = ranked[SHOWN:]
    if rest:
        summed = tuple(sum(busy.get(w, (0.0, 0.0))[i] for w, _ in rest) for i in (0, 1))
        out.append(line(sum(s for _, s in rest), summed,
                        sum(len(tests[w]) for w, _ in rest), f"{len(rest)} other directories"))
    return out


def pytest_terminal_summary(terminalreporter):
    if _started is None or not _spent:
        return
    wall = max(time.monotonic() - _started, 1e-9)
    for line in lines(_spent, _tests, wall, _busy):
        terminalreporter.write_line(line)
