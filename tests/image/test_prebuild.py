"""The run's background image builds (tests/image/prebuild.py): which builds a session's
tests need, in the order the run needs them, and that every build the VM and image tests
ask for is one of them (else the background would build what no test uses, and the
tests would build theirs on the run's critical path again)."""

import os
import re

from tests.image import prebuild
from tests.image.prebuild import APPLIANCE, APPLIANCE_UPGRADE, NODE, NODE_E2E2, PREVIOUS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_builds_follow_the_tests_collected():
    assert prebuild.needed(["tests/api/test_flood.py", "tests/cli/test_compute.py"]) == []
    assert prebuild.needed(["tests/compute/test_e2e_tcg.py"]) == [NODE, NODE_E2E2]
    assert prebuild.needed(["tests/compute/test_sqldb_on_vms.py",
                            "tests/image/test_image.py"]) == [NODE, PREVIOUS, APPLIANCE,
                                                              APPLIANCE_UPGRADE]


def test_nothing_starts_when_turned_off_and_nothing_waits_when_none_runs(tmp_path,
                                                                        monkeypatch):
    # this session's own background build (a run with the slow tests) is not this test's
    monkeypatch.setattr(prebuild, "_running", None)
    assert prebuild.start(["tests/image/test_image.py"], str(tmp_path),
                          environ={"APPLIANCE_PREBUILD": "0"}) is None
    assert not (tmp_path / "build").exists()
    prebuild.wait_for(NODE)            # returns at once: no background build here


def test_every_build_the_tests_ask_for_is_prebuilt():
    call = re.compile(r'build_image\("(\w+)"(?:, version_suffix="([\w-]+)")?'
                      r'(,\s*extra_migrations=)?')
    asked = set()
    for directory in ("tests/compute", "tests/image"):
        for name in os.listdir(os.path.join(ROOT, directory)):
            if name.startswith("test_") and name.endswith(".py"):
                with open(os.path.join(ROOT, directory, name)) as f:
                    for profile, suffix, migrations in call.findall(f.read()):
                        asked.add((profile, suffix or None, bool(migrations)))
    assert asked and asked <= set(prebuild.ORDER), asked - set(prebuild.ORDER)


def test_a_failed_build_is_marked_and_the_next_goes_on(tmp_path, monkeypatch):
    built = []

    def build(key):
        built.append(key)
        if key == NODE:
            raise RuntimeError("no network")
    monkeypatch.setattr(prebuild, "build", build)
    assert prebuild.main([str(tmp_path), "node", "previous", "node-e2e2"]) == 0
    # the Debian 12 build runs beside the others (its own checkout): their order is kept
    assert set(built) == {NODE, PREVIOUS, NODE_E2E2} and len(built) == 3
    assert [k for k in built if k != PREVIOUS] == [NODE, NODE_E2E2]
    assert (tmp_path / "node").read_text().startswith("failed: no network")
    assert (tmp_path / "previous").read_text() == "built\n"
    assert (tmp_path / "node-e2e2").read_text() == "built\n"


def test_the_debian_12_build_runs_beside_the_others(tmp_path, monkeypatch):
    import threading
    both = threading.Barrier(2, timeout=10)

    def build(key):
        if key in (NODE, PREVIOUS):
            both.wait()         # returns only when the other build is under way too
    monkeypatch.setattr(prebuild, "build", build)
    assert prebuild.main([str(tmp_path), "node", "previous"]) == 0
    assert (tmp_path / "node").read_text() == "built\n"
    assert (tmp_path / "previous").read_text() == "built\n"


def test_the_appliance_build_does_not_wait_behind_the_nodes(tmp_path, monkeypatch):
    import threading
    both = threading.Barrier(2, timeout=10)
    built = []

    def build(key):
        built.append(key)
        if key in (NODE, APPLIANCE):
            both.wait()         # returns only when the other profile's build is under way
    monkeypatch.setattr(prebuild, "build", build)
    assert prebuild.main([str(tmp_path), "node", "node-e2e2", "appliance",
                          "appliance-upgrade-test-m"]) == 0
    # within a profile, the order the run needs them in
    assert [k for k in built if k[0] == "node"] == [NODE, NODE_E2E2]
    assert [k for k in built if k[0] == "appliance"] == [APPLIANCE, APPLIANCE_UPGRADE]
    assert all((tmp_path / name).read_text() == "built\n"
               for name in ("node", "node-e2e2", "appliance", "appliance-upgrade-test-m"))


def test_each_run_of_the_suite_has_its_own_marks(tmp_path, monkeypatch):
    monkeypatch.setattr(prebuild, "_running", None)
    started = []
    monkeypatch.setattr(prebuild.subprocess, "Popen",
                        lambda cmd, **kw: started.append(cmd) or FakeProc())
    monkeypatch.setattr(prebuild.os, "geteuid", lambda: 0)
    for run in ("vms", "image"):
        (tmp_path / "build" / "prebuild" / run).mkdir(parents=True, exist_ok=True)
        (tmp_path / "build" / "prebuild" / run / "node").write_text("built\n")
    try:
        prebuild.start(["tests/image/test_image.py"], str(tmp_path),
                       environ={"APPLIANCE_SUITE_RUN": "image"})
    finally:
        monkeypatch.setattr(prebuild, "_running", None)
    assert started[0][3] == str(tmp_path / "build" / "prebuild" / "image")
    # the image run's start cleared its own marks, not the VM run's
    assert not (tmp_path / "build" / "prebuild" / "image" / "node").exists()
    assert (tmp_path / "build" / "prebuild" / "vms" / "node").exists()
    assert (tmp_path / "build" / "prebuild-image.log").exists()


class FakeProc:
    """Stands for the background build process: this test checks where its marks go,
    not a build (a build is minutes)."""
    pid = 0

    def poll(self):
        return 0
