"""The suite's image builds, started in the background when a test session begins.

A cold build of each image is minutes (docs/image.md, "Figures": mmdebstrap's downloads
and unpacking, the venv, the qcow2's compression), and the tests that need them come
late in the run: the VM tests of tests/compute and tests/image. Built in the fixtures,
they sat on the run's critical path one after the other, while the thousands of tests
before them left the second core mostly idle. So when the collected tests include any
that boot an image, a background process builds them at once, in the order the run
needs them, while the other tests run; the fixtures' own `build_image` calls then wait
for that image's build, if it is still under way, and find it cached.

Only slow tests count (tests/conftest.py): a run of the quick ones starts no build.
Nothing depends on the background: a build it could not make (no root, no network) is
made again, or fails with its reason, by the fixture that needs it. `APPLIANCE_PREBUILD=0`
turns it off. The background process is stopped at the session's end.

    python -m tests.image.prebuild DIR KEY...      # what the session starts
"""

import os
import signal
import subprocess
import sys
import threading
import time

# (profile or "previous", version suffix, with the test migrations): the order a run
# needs them in (tests/compute before tests/image)
NODE, NODE_E2E2 = ("node", None, False), ("node", "e2e2", False)
PREVIOUS = ("previous", None, False)
APPLIANCE, APPLIANCE_UPGRADE = ("appliance", None, False), ("appliance", "upgrade-test", True)
# which test files need which builds
NEEDS = {
    "tests/compute/test_e2e_tcg.py": (NODE, NODE_E2E2),
    "tests/compute/test_sqldb_on_vms.py": (NODE,),
    "tests/image/": (NODE, PREVIOUS, APPLIANCE, APPLIANCE_UPGRADE),
}
ORDER = (NODE, NODE_E2E2, PREVIOUS, APPLIANCE, APPLIANCE_UPGRADE)
TEST_MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
POLL_SECONDS = 1.0

_running = None         # (Popen, directory of done marks, keys) in the session's process


def key_name(key):
    profile, suffix, migrations = key
    return "-".join([profile] + ([suffix] if suffix else []) + (["m"] if migrations else []))


def needed(paths):
    """The builds, in ORDER, that tests at these paths (relative, '/'-separated) need."""
    wanted = {k for path in paths for prefix, keys in NEEDS.items()
              if path.startswith(prefix) for k in keys}
    return [k for k in ORDER if k in wanted]


def start(paths, root, environ=os.environ):
    """Start the background builds for the session's tests, where builds can run here."""
    global _running
    if environ.get("APPLIANCE_PREBUILD", "1") == "0" or os.geteuid() != 0 or _running:
        return None
    keys = needed(paths)
    if not keys:
        return None
    # each pytest of `make test` (tests/run_suite.py) has its own marks and log: they run
    # at once, and one's start must not clear the other's marks
    run = environ.get("APPLIANCE_SUITE_RUN", "pytest")
    marks = os.path.join(root, "build", "prebuild", run)
    os.makedirs(marks, exist_ok=True)
    for name in os.listdir(marks):
        os.unlink(os.path.join(marks, name))
    log = open(os.path.join(root, "build", f"prebuild-{run}.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "tests.image.prebuild", marks,
                             *[key_name(k) for k in keys]], cwd=root, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    _running = (proc, marks, [key_name(k) for k in keys])
    return proc


def wait_for(key):
    """Return once the background build of `key` is over (made or failed), or at once
    when none is under way in this process."""
    if _running is None:
        return
    proc, marks, names = _running
    name = key_name(key)
    if name not in names:
        return
    while proc.poll() is None and not os.path.exists(os.path.join(marks, name)):
        time.sleep(POLL_SECONDS)


def stop():
    global _running
    if _running is None:
        return
    proc = _running[0]
    _running = None
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def build(key):
    from tests.image import previous, qemu
    profile, suffix, migrations = key
    if profile == "previous":
        return previous.build_previous_image(log=sys.stdout)
    return qemu.build_image(profile, version_suffix=suffix,
                            extra_migrations=TEST_MIGRATIONS if migrations else None,
                            log=sys.stdout)


def main(argv):
    marks, names = argv[0], argv[1:]
    by_name = {key_name(k): k for k in ORDER}

    def made(name):
        started = time.monotonic()
        try:
            build(by_name[name])
            outcome = "built"
        except Exception as e:          # the fixture builds it again and says why
            outcome = f"failed: {e}"
        # one write per line: the Debian 12 build's thread writes beside
        sys.stdout.write(f"prebuild {name}: {outcome} in {time.monotonic() - started:.0f} s\n")
        sys.stdout.flush()
        with open(os.path.join(marks, name), "w") as f:
            f.write(outcome + "\n")
    # one thread per profile, each building its keys in ORDER: the appliance's build does
    # not wait behind the node's (image-build/build.py locks per profile, and the image
    # run's shared boot needs the appliance first while the VM tests need the node). The
    # Debian 12 image is built by its own commit's checkout (tests/image/previous.py),
    # under that checkout's lock: beside the others too
    by_profile = {}
    for name in names:
        by_profile.setdefault(by_name[name][0], []).append(name)

    def made_in_order(group):
        for name in group:
            made(name)
    threads = [threading.Thread(target=made_in_order, args=(group,))
               for group in by_profile.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
