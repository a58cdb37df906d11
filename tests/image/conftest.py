"""Fixtures of the image tests: one boot of the appliance image per run (`box`), which
every test needing a running appliance shares (tests/image/guest.py), so that CI boots
the image once. Tests that end that boot's life (a reboot, the upgrade's shutdown) are
marked `ends_the_boot` and run after every other test of this directory. The fixtures
are the package's (tests/image/): the VM, its disks and the work directory go when the
directory's last test is done, not at the run's end, so the tests after it run without
a guest spinning under TCG beside them (docs/testing.md, "Disk").

That boot is also the upgrade from Debian 12: the state disk it boots with was made by the
Debian 12 image (tests/image/previous.py) at a first boot, which made some state through
the API (`made`) and was powered off. So the Debian 13 image's checks all run on an
upgraded appliance, and the upgrade costs one Debian 12 build and boot, no Debian 13 one."""

import faulthandler
import json
import os
import subprocess
import time
import uuid

import pytest

from appliance.iam.builtin import ADMIN_PROJECT
from tests.image.guest import (FW_PASSWORD, FW_SSH_KEY, PASSWORD, Box, appliance_vm,
                               os_release, wait_status)
from tests.image.previous import build_previous_image
from tests.image.qemu import blank_disk, build_image, require_root
from tests.workdirs import removed_unless_failed

CONFIG_SECONDS = 600            # a config through the agent to ACTIVE in a TCG guest, busy host


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


@pytest.fixture(autouse=True)
def shared_boot_alive(request):
    """A test on the shared boot fails at once, with the reason, when that guest is gone:
    a kernel panic under TCG after the boot (ciAA, 2026-11-28, on the host's QEMU 7.2)
    otherwise left each later test to wait out its own timeouts, and the run hung."""
    if "box" in request.fixturenames:
        why = request.getfixturevalue("box").vm.gone()
        if why:
            pytest.fail(f"the shared boot (`box`) is gone before this test: {why}",
                        pytrace=False)


@pytest.fixture(scope="package")
def workdir(tmp_path_factory, request):
    # the boots' overlays and the state disk
    with removed_unless_failed(tmp_path_factory, request, "appliance-boot") as path:
        yield str(path)


@pytest.fixture(scope="package")
def image():
    require_root()
    return build_image("appliance")


@pytest.fixture(scope="package")
def ssh_key(workdir):
    path = os.path.join(workdir, "id_ed25519")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "boot-test",
                    "-f", path], check=True)
    return path


@pytest.fixture(scope="package")
def state_disk(workdir):
    """The state on a second disk: it outlives the root disk, as an upgrade needs."""
    return blank_disk(os.path.join(workdir, "state.qcow2"), "2G")


@pytest.fixture(scope="package")
def previous_image():
    """The Debian 12 appliance image (main's last bookworm commit), built from git history."""
    require_root()
    started = time.monotonic()
    built = build_previous_image()
    print(f"\nthe Debian 12 image: built (or found cached) in {time.monotonic() - started:.1f} s")
    return built


def make_state(b):
    """What the Debian 12 appliance holds before its upgrade, made through its API: a
    project, a secret (its value), a DNS domain with a record, and a config that its own
    node's agent wrote to a file of the (old) root."""
    admin = b.admin()
    project = admin.post("/v1/iam/projects", {"name": "kept-from-debian12"})
    assert project.status == 201, project
    value = "boot-test-value-" + uuid.uuid4().hex
    secret = admin.post("/v1/secret/secrets", {
        "name": "boot-test", "project_id": ADMIN_PROJECT, "constructor": {"kind": "plain"},
        "value": value})
    assert secret.status == 201, secret
    domain = admin.post("/v1/dns/domains", {"name": "boot.test",
                                            "project_id": ADMIN_PROJECT})
    assert domain.status == 201, domain
    record = admin.post(f"/v1/dns/domains/{domain.json['uuid']}/records",
                        {"type": "A", "record": {"kind": "A", "name": "www",
                                                 "address": "10.77.0.7"}})
    assert record.status == 201, record
    node = json.loads(b.ssh("cat /etc/appliance/agent.json").stdout)["node"]
    path, content = f"/etc/upgrade-test/{uuid.uuid4().hex[:8]}.conf", "kept\n"
    config = admin.post("/v1/config/configs", {
        "name": "kept-config", "project_id": ADMIN_PROJECT, "path": path,
        "target": {"kind": "node", "node": node}, "owner": "daemon", "group": "daemon",
        "mode": "0640", "body": {"kind": "text", "content": content}})
    assert config.status == 201, config
    wait_status(admin, f"/v1/config/configs/{config.json['uuid']}", "ACTIVE",
                timeout=CONFIG_SECONDS)
    assert b.ssh(f"cat {path}").stdout == content
    secret = wait_status(admin, f"/v1/secret/secrets/{secret.json['uuid']}", "ACTIVE")
    versions = admin.get("/v1/types/sqldb/versions/").json["versions"]
    return {"secret": secret["uuid"], "value": value, "name": "www.boot.test",
            "address": "10.77.0.7", "project": project.json["uuid"],
            "config": config.json["uuid"], "config_path": path, "config_content": content,
            "versions": {v["name"]: v["uuid"] for v in versions}}


@pytest.fixture(scope="package")
def made(previous_image, workdir, ssh_key, state_disk):
    """The Debian 12 appliance's life before the upgrade: its image booted once under TCG
    with the blank state disk (as `box` then boots the Debian 13 one), the state of
    make_state() made, and a clean power-off. Returns what later boots must still show,
    and what the Debian 12 machine was (its os-release, build, certificate, host key)."""
    with open(ssh_key + ".pub") as f:
        public = f.read().strip()
    # the Debian 12 image has no EFI system partition: it boots by BIOS only
    vm = appliance_vm(previous_image.disk, workdir, state_disk,
                      {FW_PASSWORD: PASSWORD, FW_SSH_KEY: public}, name="debian12",
                      firmware="bios")
    with vm:
        b = Box(vm, workdir, ssh_key, os.path.join(workdir, "known_hosts"))
        print(f"\nDebian 12 first boot: banner {b.banner_seconds:.1f} s, healthy HTTPS API "
              f"{b.healthy_seconds:.1f} s after QEMU started ({previous_image})")
        started = time.monotonic()
        state = make_state(b)
        print(f"Debian 12 state made through the API in {time.monotonic() - started:.1f} s")
        state.update(
            previous_os=os_release(b), previous_build=json.loads(
                b.ssh("cat /etc/appliance/build-info.json").stdout),
            previous_fingerprint=b.fingerprint,
            previous_host_key=b.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout)
        assert vm.shutdown(), "the Debian 12 appliance did not power off by itself"
        print(f"Debian 12 appliance: QEMU start to power-off {time.monotonic() - vm.started_at:.1f} s")
    return state


@pytest.fixture(scope="package")
def box(made, image, workdir, ssh_key, state_disk):
    """The appliance image booted once under TCG, with the state on a second disk that the
    Debian 12 image made (`made`: this boot is the upgrade to Debian 13), the admin
    password and root's SSH key in fw_cfg, and TCP 443, 53, 22 and 5432
    (sqldb_port) forwarded on 127.0.0.1 (no UDP: restrict=on drops the guest's datagrams; docs/boot.md): `box.ssh(command)` runs a command in the guest as root,
    `box.client` speaks HTTPS to its API (pinned to the console's fingerprint),
    `box.admin()` is that client logged in as admin."""
    with open(ssh_key + ".pub") as f:
        public = f.read().strip()
    vm = appliance_vm(image.raw, workdir, state_disk, {FW_PASSWORD: PASSWORD, FW_SSH_KEY: public},
                      name="old")
    with vm:
        b = Box(vm, workdir, ssh_key, os.path.join(workdir, "known_hosts"))
        print(f"\nupgrade to Debian 13: banner {b.banner_seconds:.1f} s, healthy HTTPS API "
              f"{b.healthy_seconds:.1f} s after QEMU started ({image})")
        yield b
