"""Fixtures of the image tests: one boot of the appliance image per session (`box`), which
every test needing a running appliance shares (tests/image/guest.py), so that CI boots
the image once. Tests that end that boot's life (a reboot, the upgrade's shutdown) are
marked `ends_the_boot` and run after every other test of the session."""

import faulthandler
import os
import subprocess

import pytest

from tests.image.guest import FW_PASSWORD, FW_SSH_KEY, PASSWORD, Box, appliance_vm
from tests.image.qemu import blank_disk, build_image, require_root


def pytest_configure(config):
    config.addinivalue_line("markers", "ends_the_boot: reboots or shuts down the shared "
                                       "boot (`box`): run after every other test")


HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(session, config, items):
    """Among the tests of this directory (in the places they hold in the session): those
    on the shared boot first, then those that end it, then the rest (their own VMs do
    not run beside it). Stable: the boot test's tests build on each other in file order."""
    mine = [i for i, item in enumerate(items) if str(item.path).startswith(HERE + os.sep)]

    def rank(item):
        if item.get_closest_marker("ends_the_boot"):
            return 1
        return 0 if "box" in getattr(item, "fixturenames", ()) else 2
    for i, item in zip(mine, sorted((items[i] for i in mine), key=rank)):
        items[i] = item


def pytest_runtest_setup(item):
    """Image builds and TCG boots take minutes by design: the suite-wide stack dump after
    45 s (faulthandler_timeout, meant to catch a hung request) would only be noise here.
    Cancelled before the fixtures (the session's VM boots in its first test's set-up); the
    tests keep their own bounds (pytest-timeout and every wait_for's timeout)."""
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("appliance-boot"))


@pytest.fixture(scope="session")
def image():
    require_root()
    return build_image("appliance")


@pytest.fixture(scope="session")
def ssh_key(workdir):
    path = os.path.join(workdir, "id_ed25519")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "boot-test",
                    "-f", path], check=True)
    return path


@pytest.fixture(scope="session")
def state_disk(workdir):
    """The state on a second disk: it outlives the root disk, as an upgrade needs."""
    return blank_disk(os.path.join(workdir, "state.qcow2"), "2G")


@pytest.fixture(scope="session")
def box(image, workdir, ssh_key, state_disk):
    """The appliance image booted once under TCG, with the state on a blank second disk,
    the admin password and root's SSH key in fw_cfg, and TCP 443, 53, 22 and 5432
    (sqldb_port) forwarded on 127.0.0.1 (no UDP: restrict=on drops the guest's datagrams; docs/boot.md): `box.ssh(command)` runs a command in the guest as root,
    `box.client` speaks HTTPS to its API (pinned to the console's fingerprint),
    `box.admin()` is that client logged in as admin."""
    with open(ssh_key + ".pub") as f:
        public = f.read().strip()
    vm = appliance_vm(image.raw, workdir, state_disk, {FW_PASSWORD: PASSWORD, FW_SSH_KEY: public},
                      name="old")
    with vm:
        b = Box(vm, workdir, ssh_key, os.path.join(workdir, "known_hosts"))
        print(f"\nfirst boot: banner {b.banner_seconds:.1f} s, healthy HTTPS API "
              f"{b.healthy_seconds:.1f} s after QEMU started ({image})")
        yield b
