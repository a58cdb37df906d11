"""Run the benchmarks: `python -m tests.bench` (all) or `python -m tests.bench store api`."""

import importlib
import platform
import sys
import time

from . import note

BENCHES = ["store", "api", "metrics", "iam", "secret", "em", "resolver", "repo", "dns", "memory",
           "fuzz",
           "backup", "image", "boot", "network", "compute", "compute_tcg", "vms",
           "agent", "configs", "services", "lb", "certificates", "sqldb", "tenancy", "audit", "feed",
           "longlived", "console", "scale"]


def main(argv):
    names = argv or BENCHES
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown bench(es): {', '.join(unknown)}; choose from {', '.join(BENCHES)}",
              file=sys.stderr)
        return 2
    note(f"appliance benchmarks {time.strftime('%Y-%m-%d %H:%M:%S')} on {platform.node()}: "
         f"Python {platform.python_version()}, {platform.machine()}, "
         f"{__import__('os').cpu_count()} cores; figures are printed, never asserted")
    started = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        importlib.import_module(f"tests.bench.bench_{name}").main()
        note(f"[{name}: {time.perf_counter() - t0:.0f} s]")
    note(f"\nall done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
