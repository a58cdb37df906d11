"""The image build (image-build/build.py) and the node image booted under QEMU (TCG).

The builds need root; so do the boots' builds. They skip with the reason when not root;
CI runs as root, so there they run. The first build of a checkout takes minutes (mmdebstrap);
later ones reuse build/cache.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

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
def test_bad_input_is_refused_and_nothing_written(args, message):
    before = tree(os.path.join(qemu.ROOT, "build"))
    proc = build(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert proc.stdout == ""
    assert tree(os.path.join(qemu.ROOT, "build")) == before


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


def read_from_root(raw, path):
    """A file of partition 1 (at 1 MiB), read with debugfs: no mount needed."""
    proc = subprocess.run(["debugfs", "-R", f"cat {path}", f"{raw}?offset={1024 * 1024}"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return proc.stdout


# ---- boots ----------------------------------------------------------------------------------

MARKER = "NODE-MARKER"
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
                   " root=$(findmnt -no SOURCE /)\" > /dev/ttyS0\n",
    }],
    "runcmd": [["/usr/local/bin/report-marker"]],
}


@pytest.mark.slow
@LONG
def test_node_image_boots_with_a_cloud_init_seed(node_image, tmp_path):
    seed = qemu.nocloud_seed(str(tmp_path), NODE_USER_DATA,
                             {"instance-id": "iid-test-1", "local-hostname": "node-under-test"})
    with qemu.VM(node_image.raw, tmp_path, tcp=[22], seed=seed) as vm:
        vm.wait_for(MARKER, timeout=1200)
        line = next(ln for ln in vm.serial().splitlines() if ln.startswith(MARKER))
        # the seed's hostname; the agent's unit enabled, and skipped by its condition (this
        # seed gives no agent credential); the appliance package importable from the
        # venv; the root found by its label
        assert "host=node-under-test" in line
        assert "agent=enabled" in line and "agent_ran=no" in line
        assert "venv=ok" in line
        assert "root=/dev/vda1" in line
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
        assert "/dev/vda2 (state partition)" in state_line(vm)
        vm.kill()
    # a blank second disk: formatted, the partition's files copied, then used
    data = qemu.blank_disk(str(tmp_path / "data.qcow2"), "256M")
    with qemu.VM(appliance_image.raw, tmp_path, extra_disks=[data], name="blank") as vm:
        assert "/dev/vdb (new data disk)" in state_line(vm)
        assert "copied the state partition /dev/vda2 onto /dev/vdb" in vm.serial()
        vm.kill()
    # the same disk with a fresh root (an upgrade): found by its label, not formatted again
    with qemu.VM(appliance_image.raw, tmp_path, extra_disks=[data], name="again") as vm:
        assert "/dev/vdb (data disk)" in state_line(vm)
        assert "formatting" not in vm.serial()
        vm.kill()
