"""Issue 31's VM tests timed: the two-hypervisor test, the migration test and DBaaS on VMs.

    python -m tests.bench vms
    BENCH_VMS_ROUNDS=3 python -m tests.bench vms

Each round runs the slow test modules that boot under TCG in the test network namespaces
(tests/compute/test_two_hypervisors.py and tests/compute/test_sqldb_on_vms.py; their
tests named "moves" are the migration test: a counter both ways, and the booted DBaaS
replica's VM) as `make test` runs them: one pytest, one appliance
namespace and one second machine for both (conftest.py's session fixtures). The times are
pytest's own per test (set-up, call and tear-down: a module's first test carries the
shared start), read from its JUnit XML, summed per step. Root only (the tests skip, and
the bench says so, otherwise). A round is about a quarter of an hour here: two boots of the
node image for DBaaS (the move's booted node is one of them), under TCG on 2 shared cores.
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

from . import ROOT, note, remove, spread, table, temp_dir, title

ROUNDS = int(os.environ.get("BENCH_VMS_ROUNDS", "1"))
MODULES = ["tests/compute/test_two_hypervisors.py", "tests/compute/test_sqldb_on_vms.py"]


def step_of(classname, name):
    if "moves" in name:
        return "migration (a counter both ways; a booted DBaaS replica's VM)"
    if classname.endswith("test_sqldb_on_vms"):
        return "DBaaS on VMs (2 node-image VMs, failover, rejoin)"
    return "two hypervisors (register, spread, network, cut and return)"


def steps(junit_file):
    """({step: seconds}, [failed or skipped test names]) of one pytest run."""
    totals, bad = {}, []
    for case in ET.parse(junit_file).iter("testcase"):
        step = step_of(case.get("classname", ""), case.get("name", ""))
        totals[step] = totals.get(step, 0.0) + float(case.get("time") or 0)
        if any(case.find(tag) is not None for tag in ("failure", "error", "skipped")):
            bad.append(case.get("name"))
    return totals, bad


def main():
    title("VM tests under TCG: two hypervisors, migration, DBaaS on VMs (seconds)")
    if os.geteuid() != 0:
        note("skipped: the namespaces need root")
        return
    work = temp_dir("vms")
    runs = {}
    try:
        for i in range(ROUNDS):
            junit = os.path.join(work, f"round-{i}.xml")
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                                   f"--junitxml={junit}", *MODULES], cwd=ROOT,
                                  capture_output=True, text=True)
            if not os.path.exists(junit):
                note(f"round {i + 1}: pytest wrote no report:\n{done.stdout[-2000:]}")
                continue
            totals, bad = steps(junit)
            for step, seconds in totals.items():
                runs.setdefault(step, []).append(seconds)
            note(f"round {i + 1}: " + ", ".join(f"{s.split(' (')[0]} {t:.0f} s"
                                                 for s, t in totals.items())
                 + (f"; not passed: {', '.join(bad)}" if bad else ""))
    finally:
        remove(work)
    if runs:
        table(["step", "seconds min / median / max", "rounds"],
              [[step, spread(values, "{:.0f}"), len(values)]
               for step, values in sorted(runs.items())])
    load1, _, _ = os.getloadavg()
    note(f"(load average after: {load1:.2f}; TCG on 2 shared cores)")
