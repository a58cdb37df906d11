"""The image build (image-build/build.py) and the node image booted under QEMU (TCG).

The builds need root; so do the boots' builds. They skip with the reason when not root;
CI runs as root, so there they run. The first build of a checkout takes minutes (mmdebstrap);
later ones reuse build/cache.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from tests import waiting
from tests.image import qemu

BUILD = qemu.BUILD
# a cold build (mmdebstrap of ~500 packages) plus a boot under TCG on a shared 2-core
# machine: minutes each; this bounds a hang, it measures nothing
LONG = pytest.mark.timeout(3600)


def build(*args, user=None, script=BUILD):
    cmd = [sys.executable, script, *args]
    if user:
        # Debian's python3: the default interpreter lives in root's home, unreadable to others
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups",
               "/usr/bin/python3", script, *args]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def tree(path):
    if not os.path.isdir(path):
        return None
    return sorted((os.path.relpath(os.path.join(d, f), path), os.stat(os.path.join(d, f)).st_mtime_ns)
                  for d, _, fs in os.walk(path) for f in fs)


# ---- bad input: refused before anything is written -----------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--profile", "desktop"], "unknown profile 'desktop': choose from appliance, node"),
    (["--profile", "node", "--version-suffix", "a/b"], "--version-suffix 'a/b'"),
    (["--profile", "node", "--extra-migrations", "/nonexistent/dir"],
     "--extra-migrations '/nonexistent/dir' is not a directory"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_bad_input_is_refused_and_nothing_written(args, tmp_path, message):
    # a copy of image-build/ writes under its own <copy>/build: the checkout's build/ is
    # not watched, since the slow run (tests/run_suite.py) builds images into it meanwhile
    shutil.copytree(os.path.dirname(BUILD), tmp_path / "image-build")
    before = tree(str(tmp_path))
    proc = build(*args, script=str(tmp_path / "image-build" / "build.py"))
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert proc.stdout == ""
    assert tree(str(tmp_path)) == before
    assert not os.path.exists(tmp_path / "build")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the build as another user")
def test_not_root_is_refused_clearly():
    # the checkout may sit in a directory only root can enter (a clone under `mktemp -d`
    # is 0700), so the other user runs a copy of image-build/ from a directory it can read
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        readable = os.path.join(tmp, "image-build")
        shutil.copytree(os.path.dirname(BUILD), readable)
        proc = build("--profile", "node", user=65534, script=os.path.join(readable, "build.py"))
    assert proc.returncode == 1
    assert "must run as root" in proc.stderr


# ---- builds ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def node_image():
    qemu.require_root()
    return qemu.build_image("node")


@pytest.mark.slow
@LONG
def test_a_second_build_with_no_change_is_cached(node_image):
    before = os.stat(node_image.raw)
    proc = build("--profile", "node")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for layer in ("rootfs (node, ", "wheels (", "disk (node, "):
        line = next(ln for ln in proc.stdout.splitlines() if layer in ln)
        assert line.endswith(": cached"), line
    assert "mmdebstrap" not in proc.stdout
    assert "size report (node 0.1.0" in proc.stdout
    after = os.stat(node_image.raw)
    # the same file, not rebuilt: same inode and modification time
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert qemu.Image(node_image.dir).info["recipe_hash"] == node_image.info["recipe_hash"]


@pytest.mark.slow
@LONG
def test_a_newer_build_rebuilds_only_the_last_layer(node_image, tmp_path):
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / "m9999_test.py").write_text("# a migration from the test\nVERSION = 9999\n")
    proc = build("--profile", "node", "--version-suffix", "t1", "--extra-migrations", str(migrations))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert next(ln for ln in proc.stdout.splitlines() if "rootfs (node, " in ln).endswith("cached")
    assert next(ln for ln in proc.stdout.splitlines() if "wheels (" in ln).endswith("cached")
    assert "extra migration m9999_test.py" in proc.stdout
    newer = qemu.Image(qemu.image_dir("node", "t1"))
    assert newer.version == node_image.version + "+t1"
    assert newer.info["rootfs_hash"] == node_image.info["rootfs_hash"]
    assert newer.info["recipe_hash"] != node_image.info["recipe_hash"]
    # inside the image: the migration in the installed package, the build-info beside it
    assert "VERSION = 9999" in read_from_root(newer.raw, "/opt/appliance/venv/lib/python3.13/"
                                              "site-packages/appliance/migrations/m9999_test.py")
    assert '"version": "0.1.0+t1"' in read_from_root(newer.raw, "/etc/appliance/build-info.json")
    # the older build is still there, untouched, for an upgrade test to boot first
    assert os.path.exists(node_image.raw)
    # this build is the test's alone: its gigabyte goes (docs/testing.md, "Disk")
    shutil.rmtree(newer.dir)
    shutil.rmtree(os.path.join(qemu.ROOT, "build", "cache", f"disk-node-{newer.info['recipe_hash']}"))


def partition_table(raw):
    """sfdisk's view of a disk image: {"label", "partitions": [{"start", "size" (sectors),
    "type", "bootable"?}, ...]}."""
    proc = subprocess.run(["sfdisk", "--json", raw], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)["partitiontable"]


def offset_of(raw, kind):
    """The byte offset of the root (the bootable partition) or of the ESP (type ef)."""
    part, = [p for p in partition_table(raw)["partitions"]
             if (p.get("bootable") if kind == "root" else p["type"] == "ef")]
    return part["start"] * 512


def read_from_root(raw, path, text=True):
    """A file of the root partition, read with debugfs: no mount needed."""
    proc = subprocess.run(["debugfs", "-R", f"cat {path}",
                           f"{raw}?offset={offset_of(raw, 'root')}"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, check=True)
    return proc.stdout


def read_from_esp(raw, path, text=True):
    """A file of the EFI system partition, read with mtools: no mount needed."""
    proc = subprocess.run(["mtype", "-i", f"{raw}@@{offset_of(raw, 'esp')}", f"::{path}"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, check=True,
                          env={**os.environ, "MTOOLS_SKIP_CHECK": "1"})
    return proc.stdout


@pytest.mark.slow
@LONG
@pytest.mark.parametrize("profile", ["node", "appliance"])
def test_the_disk_boots_by_bios_and_by_uefi(profile):
    """Both boot paths are on each profile's disk, seen without booting it: for BIOS the
    MBR's extlinux code, the bootable root and extlinux's menu in it; for UEFI an EFI
    system partition with systemd-boot where firmware looks on a disk it has no entry for,
    and a loader entry starting the root's own kernel and initrd with the menu's command
    line. The partitions in the order docs/image.md gives (the growable one last)."""
    image = qemu.build_image(profile)
    table = partition_table(image.raw)
    assert table["label"] == "dos"
    parts = table["partitions"]
    kinds = [("esp" if p["type"] == "ef" else "root" if p.get("bootable") else "state")
             for p in parts]
    assert kinds == {"node": ["esp", "root"], "appliance": ["root", "esp", "state"]}[profile]
    # the appliance's root where every earlier build had it (1 MiB, 3 GiB): an old disk's
    # partition 1 can still be overwritten in place (docs/image.md, "Upgrade")
    if profile == "appliance":
        assert (parts[0]["start"], parts[0]["size"]) == (2048, 3072 * 2048)
    with open(image.raw, "rb") as f, open("/usr/lib/EXTLINUX/mbr.bin", "rb") as mbr:
        assert f.read(440) == mbr.read(440)
    label = {"node": "node-root", "appliance": "appliance-root"}[profile]
    extlinux = read_from_root(image.raw, "/boot/extlinux/extlinux.conf")
    append = next(ln.split("APPEND ", 1)[1] for ln in extlinux.splitlines() if "APPEND " in ln)
    assert f"root=LABEL={label} " in append
    ls = subprocess.run(["debugfs", "-R", "ls /boot/extlinux",
                         f"{image.raw}?offset={offset_of(image.raw, 'root')}"],
                        capture_output=True, text=True, check=True).stdout
    assert "ldlinux.sys" in ls
    # the ESP, listed with mtools as a user would
    esp = f"{image.raw}@@{offset_of(image.raw, 'esp')}"
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    listing = subprocess.run(["mdir", "-b", "-/", "-i", esp, "::/"], capture_output=True,
                             text=True, check=True, env=env).stdout.split()
    assert "::/EFI/BOOT/BOOTX64.EFI" in listing
    assert f"::/loader/entries/{profile}.conf" in listing
    loader = read_from_esp(image.raw, "/EFI/BOOT/BOOTX64.EFI", text=False)
    assert loader[:2] == b"MZ" and b"systemd-boot" in loader
    assert "timeout 0" in read_from_esp(image.raw, "/loader/loader.conf")
    entry = dict(ln.split(" ", 1) for ln in read_from_esp(
        image.raw, f"/loader/entries/{profile}.conf").splitlines() if " " in ln)
    assert entry["options"] == append
    for key, boot in (("linux", "vmlinuz-"), ("initrd", "initrd.img-")):
        name = entry[key].rsplit("/", 1)[1]
        assert name.startswith(boot)
        assert (read_from_esp(image.raw, entry[key], text=False)
                == read_from_root(image.raw, f"/boot/{name}", text=False)), key


# ---- boots ----------------------------------------------------------------------------------

MARKER = "NODE-MARKER"
MARKER_LINE = re.compile(MARKER + r" host=[^\n]* end")
# cloud-init runs this at its last stage; the line on the serial console shows that the
# seed was read and what the guest looks like from inside. List form and a write_files
# script: cloud-init drops user-data with an unquoted ": " in a runcmd string.
NODE_USER_DATA = {
    "write_files": [{
        "path": "/usr/local/bin/report-marker",
        "permissions": "0755",
        "content": "#!/bin/sh\n"
                   f"echo \"{MARKER} host=$(hostname) agent=$(systemctl is-enabled appliance-agent.service)"
                   " agent_ran=$(systemctl show -p ConditionResult --value appliance-agent)"
                   " venv=$(/opt/appliance/venv/bin/python -c 'import appliance; print(\"ok\")')"
                   " root=$(findmnt -no SOURCE /)"
                   " efi=$(test -d /sys/firmware/efi && echo yes || echo no) end\" > /tmp/marker\n"
                   # three times: a kernel message on the same console may cut one line
                   "for i in 1 2 3; do cat /tmp/marker > /dev/ttyS0; sleep 1; done\n",
    }],
    "runcmd": [["/usr/local/bin/report-marker"]],
}


@pytest.mark.slow
@LONG
def test_node_image_boots_with_a_cloud_init_seed(node_image, tmp_path):
    seed = qemu.nocloud_seed(str(tmp_path), NODE_USER_DATA,
                             {"instance-id": "iid-test-1", "local-hostname": "node-under-test"})
    # BIOS (SeaBIOS): the path compute's libvirt domains boot a node by; the appliance's
    # shared boot (`box`) takes the UEFI path
    with qemu.VM(node_image.raw, tmp_path, tcp=[22], seed=seed, firmware="bios") as vm:
        vm.wait_for(MARKER, timeout=1200)
        # the whole line, wherever on a console line it starts (after other output with
        # no newline of its own, seen once): its last word written
        line = waiting.eventually(lambda: (lambda m: m and m.group(0))(
            MARKER_LINE.search(vm.serial())), 60, "the whole marker line", interval=0.5)
        # the seed's hostname; the agent's unit enabled, and skipped by its condition (this
        # seed gives no agent credential); the appliance package importable from the
        # venv; the root found by its label (partition 2, after the ESP); no EFI firmware
        assert "host=node-under-test" in line
        assert "agent=enabled" in line and "agent_ran=no" in line
        assert "venv=ok" in line
        assert "root=/dev/vda2" in line
        assert "efi=no" in line
        # the forwarded port on loopback reaches the guest's sshd
        with socket.create_connection(("127.0.0.1", vm.port(22)), timeout=30) as s:
            s.settimeout(30)
            assert s.recv(64).startswith(b"SSH-2.0-OpenSSH")
        assert vm.shutdown(timeout=300), "the guest did not power off by itself"
    assert not vm.running()


def test_a_vm_never_outlives_its_block(tmp_path):
    """QEMU is killed even when the test inside the block fails."""
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("qemu-system-x86 is not installed")
    disk = qemu.blank_disk(str(tmp_path / "empty.qcow2"), "16M")
    with pytest.raises(TimeoutError):
        with qemu.VM(disk, tmp_path, overlay=False, tcp=[22], udp=[53]) as vm:
            assert vm.running()
            assert vm.port(22) != vm.port(53, "udp")
            vm.wait_for("never printed", timeout=2)
    assert not vm.running()
    assert vm.proc.returncode is not None


@pytest.fixture(scope="module")
def appliance_image():
    qemu.require_root()
    return qemu.build_image("appliance")


def state_line(vm):
    """The state picker's verdict on the console (appliance-state.service)."""
    # ") holds": systemd's own status line says "...disk that holds /var/lib/appliance..."
    vm.wait_for(") holds /var/lib/appliance", timeout=1200)
    return next(ln for ln in vm.serial().splitlines() if ") holds /var/lib/appliance" in ln)


@pytest.mark.slow
@LONG
def test_the_state_moves_to_a_blank_second_disk_once(appliance_image, tmp_path):
    # one disk: the state partition
    with qemu.VM(appliance_image.raw, tmp_path, name="one-disk") as vm:
        assert "/dev/vda3 (state partition)" in state_line(vm)
        vm.kill()
    # a blank second disk: formatted, the partition's files copied, then used
    data = qemu.blank_disk(str(tmp_path / "data.qcow2"), "256M")
    with qemu.VM(appliance_image.raw, tmp_path, extra_disks=[data], name="blank") as vm:
        assert "/dev/vdb (new data disk)" in state_line(vm)
        assert "copied the state partition /dev/vda3 onto /dev/vdb" in vm.serial()
        vm.kill()
    # the same disk with a fresh root (an upgrade): found by its label, not formatted again
    with qemu.VM(appliance_image.raw, tmp_path, extra_disks=[data], name="again") as vm:
        assert "/dev/vdb (data disk)" in state_line(vm)
        assert "formatting" not in vm.serial()
        vm.kill()
