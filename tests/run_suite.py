"""`make test`: the suite as three pytest runs side by side: the slow tests of
tests/image, the other slow tests, and the quick ones.

Why: in one pytest the slow tests (image builds, QEMU boots under TCG, VMs in namespaces)
came after the quick ones and left part of the second core idle while they waited on a
guest; the suite took 51.7 min in the project's CI (docs/testing.md, "Three runs side by
side"). Split in two by the `slow` mark, the slow run was the critical path: the VM
tests (tests/compute, tests/network: 27 min) then the image tests (29 min), one after
the other at 1.6-1.8 cores, 50.4 min in the project's CI. The image tests share nothing
with the VM tests but the image builds (under the build's lock per profile, and made
once), so they are a run of their own, which waits for its builds while the VM tests run.
Each run keeps its own fixtures, temporary directories and ports (tests/ports.py retries
what another process took), and its own background builds' marks (tests/image/prebuild.py,
by APPLIANCE_SUITE_RUN), as two whole CIs beside each other already did.

Each run's lines are relayed as they come, behind its name, so the CI log shows all of them
progressing; each ends with its own failures, `--durations` and time by directory. The
last lines repeat every run's failed tests (pytest's `FAILED`/`ERROR` summary lines, a run
at most RECAP_LINES of them) above the `suite:` line: a CI that shows only the log's tail
still names them, though the quick run's own summary came minutes before the image run's
end. The suite passes when all pass (pytest's 5, "no tests collected", counts as
passing: a selection can be empty). Stopping `make` stops every run.

    python -m tests.run_suite [PYTEST-ARGS...]    # extra arguments go to every run
"""

import os
import signal
import subprocess
import sys
import threading
import time

IMAGE_TESTS = "tests/image"
# (name, selection, verbosity): the slow runs' few tests take minutes each, so they print
# a line per file (pytest's default) where -q would print nothing until 72 had ended
RUNS = (("vms", ("-m", "slow", f"--ignore={IMAGE_TESTS}"), ()),
        ("image", ("-m", "slow", IMAGE_TESTS), ()),
        ("quick", ("-m", "not slow"), ("-q",)))
PASSING = (0, 5)
RECAP_LINES = 15
# pytest's short summary lines (-rfE, its default): "FAILED tests/path::test - reason"; a
# captured log line starts "ERROR    " but never so
SUMMARY = (b"FAILED tests/", b"ERROR tests/")


def command(selection, verbosity, extra):
    return [sys.executable, "-m", "pytest", *verbosity, "--durations=40", *selection, *extra]


def relay(name, proc, out, lock, started, minutes, failed):
    """Copy one run's lines to `out` behind its name, keeping its summary's failures in
    `failed`; at its end, note how long it took."""
    prefix = f"{name:>5}| ".encode()
    for line in iter(proc.stdout.readline, b""):
        if line.startswith(SUMMARY):
            failed.setdefault(name, []).append(line)
        with lock:
            out.write(prefix + line)
            out.flush()
    proc.wait()
    minutes[name] = (time.monotonic() - started) / 60


def recap(failed):
    """The runs' failed tests again, behind their runs' names, at most RECAP_LINES a run."""
    lines = []
    for name, summary in failed.items():
        lines += [f"{name:>5}! ".encode() + line for line in summary[:RECAP_LINES]]
        if len(summary) > RECAP_LINES:
            lines.append(f"{name:>5}! ... and {len(summary) - RECAP_LINES} more\n".encode())
    return b"".join(lines)


def verdict(codes):
    """The suite's exit status from each run's: the first failing one's, else 0."""
    for code in codes:
        if code not in PASSING:
            return code
    return 0


def program(extra, out):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    lock = threading.Lock()
    started = time.monotonic()
    procs, relays, minutes, failed = [], [], {}, {}

    def stop(signum, frame):
        # pytest itself, as a Ctrl-C: it tears its fixtures down (their QEMUs, namespaces
        # and servers); a SIGTERM to its group killed it without that and left its QEMUs
        for _, proc in procs:
            try:
                proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
        raise SystemExit(128 + signum)
    # set before the runs start: a caught signal is reset to its default in the child at
    # exec, an ignored one stays ignored. Started in the background by a shell (`make test
    # &`, nohup), this process inherits SIGINT ignored, and a pytest that inherits it never
    # gets its KeyboardInterrupt: stopped, it went on with its tests
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    for name, selection, verbosity in RUNS:
        proc = subprocess.Popen(command(selection, verbosity, extra), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=dict(env, APPLIANCE_SUITE_RUN=name),
                                start_new_session=True)
        procs.append((name, proc))
        t = threading.Thread(target=relay, args=(name, proc, out, lock, started, minutes,
                                                 failed),
                             daemon=True)
        t.start()
        relays.append(t)

    for t in relays:
        t.join()
    codes = [proc.wait() for _, proc in procs]
    out.write(recap(failed))
    out.write(("suite: " + "; ".join(f"{name} exit {code} after {minutes[name]:.1f} min"
                                      for (name, _), code in zip(procs, codes)) + "\n").encode())
    out.flush()
    return verdict(codes)


def main():
    sys.exit(program(sys.argv[1:], sys.stdout.buffer))


if __name__ == "__main__":
    main()
