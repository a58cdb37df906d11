"""`python -P module_probe.py OUT MODULE ARGS...` runs `python -m MODULE ARGS...` unchanged
and, when that process exits, writes the names of every module it had imported to OUT
(one per line). Used by test_imports.py to see what a real process loads; self-contained
on purpose, so that the probe itself imports nothing the process would not."""

import atexit
import runpy
import sys

out, module = sys.argv[1], sys.argv[2]


def dump():
    with open(out, "w") as f:
        f.write("\n".join(sorted(sys.modules)) + "\n")


atexit.register(dump)
sys.argv = [module] + sys.argv[3:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
