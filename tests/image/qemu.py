"""Build the images and boot them under QEMU (TCG) for tests and benches.

    img = build_image("node")                  # runs image-build/build.py (cached: instant)
    with VM(img.raw, tmp_path, tcp=[22], seed=nocloud_seed(tmp_path, user_data)) as vm:
        vm.wait_for("MARKER", timeout=600)
        vm.port(22)                            # the host port forwarded to the guest's 22

Every VM boots a qcow2 overlay over the built raw image, so the cached image is never
written. /dev/kvm is unusable on these machines (see machine-facts), so QEMU always runs
with `-accel tcg`. The guest's network is QEMU user networking with `restrict=on`: the
guest reaches nothing outside, and only the forwarded ports on 127.0.0.1 reach it.
A VM is always stopped in a `finally` (the context manager, or stop()), so no QEMU is
ever left running after a test.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from daemons import DAEMONS
from tests import ports
from tests.image import prebuild

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the units of the appliance's long-running processes: the API and every daemon but the
# backup, which the image runs as a timer's oneshot (docs/backup.md); the agent's runs
# only on an enrolled node (ConditionPathExists)
APPLIANCE_UNITS = ["appliance-api"] + [f"appliance-{name}" for name in
                                       DAEMONS if name != "backup"]
BUILD = os.path.join(ROOT, "image-build", "build.py")
IMAGES = os.path.join(ROOT, "build", "images")
# UEFI firmware from Debian's ovmf: the code read-only and shared, the variables (NVRAM) a
# private copy per VM; the 4 MiB builds, the only ones Debian 13 still ships. Not the
# secboot build: it needs q35 with SMM, and the image's loader is unsigned (docs/image.md)
OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.fd"
OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.fd"
FIRMWARES = ("bios", "uefi")


# ---- building -----------------------------------------------------------------------------

class Image:
    """A built image: its raw and compressed qcow2 disks and its build-info.json."""

    def __init__(self, directory):
        self.dir = directory
        self.raw = os.path.join(directory, "disk.raw")
        self.qcow2 = os.path.join(directory, "disk.qcow2")
        with open(os.path.join(directory, "build-info.json")) as f:
            self.info = json.load(f)

    @property
    def disk(self):
        """The disk to boot (through an overlay): the raw one, or the compressed qcow2 of a
        build that kept no raw (`build_image`'s newer builds, the trimmed previous image)."""
        return self.raw if os.path.exists(self.raw) else self.qcow2

    @property
    def profile(self):
        return self.info["profile"]

    @property
    def version(self):
        return self.info["version"]

    def __repr__(self):
        return f"Image({self.dir!r}, version={self.version!r})"


def image_dir(profile, version_suffix=None):
    """Where build.py puts the image of this profile (and suffix)."""
    return os.path.join(IMAGES, profile + (f"-{version_suffix}" if version_suffix else ""))


def build_image(profile="appliance", version_suffix=None, extra_migrations=None, log=None):
    """Build the image (or reuse the cached one: instant when nothing changed).

    version_suffix and extra_migrations build a newer build for upgrade tests (they
    change only the last layer). A newer build keeps only its compressed qcow2
    (`--no-raw`): it is booted through an overlay or served as a VM image, never read by
    partition, and its raw disk would be most of a gigabyte of the run's disk
    (docs/testing.md, "Disk"). The build's output goes to `log` (a file object),
    else to this process's stderr; a failed build raises with its output's tail.
    Needs root (the build program says so clearly otherwise).
    """
    # the session's background build of this image (tests/image/prebuild.py), if one is
    # under way: this build then finds it cached
    prebuild.wait_for((profile, version_suffix, bool(extra_migrations)))
    cmd = [sys.executable, BUILD, "--profile", profile]
    if version_suffix:
        cmd += ["--version-suffix", version_suffix]
    if extra_migrations:
        cmd += ["--extra-migrations", str(extra_migrations)]
    if version_suffix:
        cmd += ["--no-raw"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (log or sys.stderr).write(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"image build failed ({proc.returncode}): {' '.join(cmd)}\n"
                           + "\n".join(proc.stdout.splitlines()[-30:]))
    return Image(image_dir(profile, version_suffix))


# ---- disks and seeds ----------------------------------------------------------------------

def overlay_disk(base, path):
    """A qcow2 file at `path` backed by the image `base` (never written through it)."""
    fmt = "raw" if base.endswith(".raw") else "qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", fmt,
                    "-b", os.path.abspath(base), path], check=True)
    return path


def blank_disk(path, size="1G"):
    """An empty qcow2 disk (a data disk that the appliance formats on first sight)."""
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", path, size], check=True)
    return path


def nocloud_seed(directory, user_data, meta_data=None, name="seed.iso"):
    """A NoCloud seed ISO (label cidata) from user-data text (or a dict: #cloud-config).

    Uses cloud-localds when installed, else genisoimage or xorriso directly.
    """
    if isinstance(user_data, dict):
        import yaml
        user_data = "#cloud-config\n" + yaml.safe_dump(user_data, sort_keys=False)
    meta_data = meta_data or "instance-id: iid-test\nlocal-hostname: node\n"
    if isinstance(meta_data, dict):
        import yaml
        meta_data = yaml.safe_dump(meta_data)
    src = os.path.join(directory, name + ".d")
    os.makedirs(src, exist_ok=True)
    for fname, text in (("user-data", user_data), ("meta-data", meta_data)):
        with open(os.path.join(src, fname), "w") as f:
            f.write(text)
    iso = os.path.join(directory, name)
    ud, md = os.path.join(src, "user-data"), os.path.join(src, "meta-data")
    if shutil.which("cloud-localds"):
        cmd = ["cloud-localds", iso, ud, md]
    elif shutil.which("genisoimage"):
        cmd = ["genisoimage", "-quiet", "-output", iso, "-volid", "cidata", "-joliet", "-rock", ud, md]
    elif shutil.which("xorriso"):
        cmd = ["xorriso", "-as", "genisoimage", "-quiet", "-output", iso, "-volid", "cidata",
               "-joliet", "-rock", ud, md]
    else:
        raise RuntimeError("no tool to make a NoCloud seed: install cloud-image-utils, "
                           "genisoimage or xorriso")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return iso


def free_port(kind=socket.SOCK_STREAM):
    """A port free on 127.0.0.1 now (QEMU binds it a moment later: a tiny race, retried)."""
    return ports.free_port(kind=kind)


# ---- the VM -------------------------------------------------------------------------------

# what Linux prints last when it panics (then it hangs, or reboots after panic= seconds)
PANIC = "Kernel panic - not syncing"
# what Linux prints last before it resets the machine (a power-off prints "Power down")
RESTARTING = "reboot: Restarting system"


class GuestPanicked(RuntimeError):
    """The guest's kernel panicked. Seen under TCG, on the Debian 12 host's QEMU 7.2 with
    the Debian 13 guests' 6.12 kernel, twice in one suite run of some twenty (2026-11-27),
    at load 1 and at load 14: a stray `int3` in text just patched by the kernel
    (sched_clock_cpu, 3 s into a boot of the appliance image), a double fault right after
    a cmpxchg16b in kmalloc (a node's sshd). Neither is the image's doing: the same boots
    pass on every other run. Before this was looked for, such a boot was waited on until
    its banner's timeout (900 s)."""


class VM:
    """One QEMU process booting `disk` (through an overlay in `workdir`).

    tcp, udp: guest ports to forward from free ports on 127.0.0.1 (see port()).
    extra_disks: paths of further disks (qcow2 or raw), attached in order after the boot
        disk (/dev/vdb, ...); the seed, when given, comes after them.
    fw_cfg: {name: string} entries, e.g. {"opt/appliance/admin-password": "pw"}.
    seed: a NoCloud seed ISO path (nocloud_seed()).
    overlay: False boots `disk` itself (written!): a disk this test owns, e.g. to reboot
        the same disk in a second VM; the default makes a fresh overlay over `disk`.
    host_ports: {(proto, guest port): host port} for forwards on fixed ports instead of
        free ones (docs/boot.md's line, which tests/image/test_boot_doc.py compares).
    firmware: "bios" (SeaBIOS, QEMU's default: the MBR code and extlinux) or "uefi" (OVMF:
        the EFI system partition's systemd-boot), with its variables in
        `<workdir>/<name>-efivars.fd`, copied from OVMF_VARS at the first start and kept
        for the VM's later starts, as a machine keeps its NVRAM.
    """

    def __init__(self, disk, workdir, *, tcp=(), udp=(), extra_disks=(), fw_cfg=None,
                 seed=None, memory=1024, cpus=2, overlay=True, name="vm", host_ports=None,
                 firmware="bios"):
        if firmware not in FIRMWARES:
            raise ValueError(f"firmware {firmware!r}: choose from {', '.join(FIRMWARES)}")
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.name = name
        self.firmware = firmware
        self.efi_vars = os.path.join(self.workdir, f"{name}-efivars.fd")
        self.disk = (overlay_disk(disk, os.path.join(self.workdir, f"{name}-root.qcow2"))
                     if overlay else str(disk))
        self.tcp, self.udp = list(tcp), list(udp)
        self.extra_disks = [str(d) for d in extra_disks]
        self.fw_cfg = dict(fw_cfg or {})
        self.seed = seed
        self.memory, self.cpus = memory, cpus
        self.serial_log = os.path.join(self.workdir, f"{name}-serial.log")
        self.qemu_log = os.path.join(self.workdir, f"{name}-qemu.log")
        self.qmp_path = os.path.join(self.workdir, f"{name}-qmp.sock")
        self.ports = {}          # ("tcp"|"udp", guest port) -> host port
        self.host_ports = dict(host_ports or {})
        self.proc = None
        self.started_at = None
        self.cold_reset = False     # see restart_at_reset()

    # -- life cycle

    def command(self):
        fwds = []
        for proto, guest_ports in (("tcp", self.tcp), ("udp", self.udp)):
            kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
            for gp in guest_ports:
                hp = self.host_ports.get((proto, gp)) or free_port(kind)
                self.ports[(proto, gp)] = hp
                fwds.append(f"hostfwd={proto}:127.0.0.1:{hp}-:{gp}")
        cmd = ["qemu-system-x86_64", "-accel", "tcg", "-m", str(self.memory),
               "-smp", str(self.cpus), "-nodefaults", "-display", "none"]
        if self.firmware == "uefi":
            cmd += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
                    "-drive", f"if=pflash,format=raw,unit=1,file={self.efi_vars}"]
        cmd += ["-chardev", f"file,id=s0,path={self.serial_log}", "-serial", "chardev:s0",
                "-qmp", f"unix:{self.qmp_path},server=on,wait=off",
                # the boot disk first in the firmware's boot order (bootindex): OVMF then
                # connects only the devices that order names, and not every device it
                # finds (the NIC's network stack included); SeaBIOS tries it first too
                "-drive", f"file={self.disk},if=none,id=boot,format={_format(self.disk)},"
                          "cache=unsafe",
                "-device", "virtio-blk-pci,drive=boot,bootindex=0",
                "-netdev", ",".join(["user,id=n0,restrict=on"] + fwds),
                # no option ROM (iPXE) on the NIC: nothing here boots from the network, and
                # loading the ROM's driver takes the firmware seconds under TCG
                "-device", "virtio-net-pci,netdev=n0,romfile=",
                "-device", "virtio-rng-pci"]
        for d in self.extra_disks:
            cmd += ["-drive", f"file={d},if=virtio,format={_format(d)},cache=unsafe"]
        if self.seed:
            cmd += ["-drive", f"file={self.seed},if=virtio,format=raw,readonly=on"]
        for key, value in self.fw_cfg.items():
            cmd += ["-fw_cfg", f"name={key},string={value}"]
        return cmd

    def start(self):
        """Start QEMU (retrying once if a picked port was taken meanwhile)."""
        if self.firmware == "uefi" and not os.path.exists(self.efi_vars):
            if not os.path.exists(OVMF_VARS):
                raise RuntimeError(f"{OVMF_VARS} is missing: apt-get install ovmf")
            shutil.copyfile(OVMF_VARS, self.efi_vars)
        for attempt in range(3):
            open(self.serial_log, "w").close()
            self.ports = {}
            log = open(self.qemu_log, "w")
            try:
                self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
            finally:
                log.close()
            self.started_at = time.monotonic()
            time.sleep(0.5)
            if self.proc.poll() is None:
                return self
            err = self.qemu_output()
            if "Could not set up host forwarding" not in err or attempt == 2:
                raise RuntimeError(f"QEMU did not start: {err}")
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def restart_at_reset(self):
        """Make the guest's next reset a cold start: QEMU exits at the reset, its disks
        flushed as at any exit (QMP set-action reboot=shutdown), and wait_for starts it
        again (the same disks and NVRAM; new host ports), as a machine switched off and on.

        Why: after its own `systemctl reboot` the UEFI guest stalled in OVMF for good (the
        console's last line "reboot: Restarting system"; QMP showed the CPUs in
        firmware code at 0x3f02b...) in two suite runs of three (2026-11-27, -28, the
        machine busy), on this host's QEMU 7.2 and OVMF 2022.11 under TCG; never in a
        cold start, and not in probe reboots on a quiet machine. A warm reset through
        OVMF is the emulator's and firmware's business; what the tests of a reboot ask
        is what the guest keeps across it."""
        self.qmp("set-action", reboot="shutdown")
        self.cold_reset = True

    def port(self, guest_port, proto="tcp"):
        return self.ports[(proto, guest_port)]

    def shutdown(self, timeout=120):
        """ACPI power-off (a clean shutdown of the guest); kill if it takes too long.

        Returns True when the guest powered off by itself.
        """
        if not self.running():
            return True
        try:
            self.qmp("system_powerdown")
            self.proc.wait(timeout)
            return True
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
            return False

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def stop(self, timeout=60):
        try:
            self.shutdown(timeout)
        finally:
            self.kill()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.kill()
            raise

    def __exit__(self, exc_type, exc, tb):
        # after a failure the guest's state does not matter: no waiting for a power-off
        if exc_type is None:
            self.stop()
        else:
            self.kill()

    # -- the serial console

    def serial(self, since=0):
        with open(self.serial_log, "rb") as f:
            f.seek(since)
            return f.read().decode("utf-8", "replace")

    def mark(self):
        """The console's current length: wait_for(..., since=vm.mark()) sees only later text."""
        return os.path.getsize(self.serial_log)

    def wait_for(self, text, timeout, since=0, restarts_after_panic=0):
        """Wait until `text` appears on the serial console; returns the seconds waited.

        Raises TimeoutError (with the console's last lines) on timeout, RuntimeError at
        once if QEMU exits, and GuestPanicked at once if the guest's kernel panics. With
        `restarts_after_panic`, a panicked guest is killed and started again (the same
        disks, as after a power cut; new host ports) up to that many times, and its new
        console is watched: see GuestPanicked for why. After restart_at_reset(), QEMU's
        exit at the guest's reset (its console's last line RESTARTING) starts it again
        once, and its new console is watched.
        """
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            console = self.serial(since)
            if text in console:
                return time.monotonic() - t0
            if PANIC in console:
                if restarts_after_panic <= 0:
                    raise GuestPanicked(f"the guest's kernel panicked before {text!r} "
                                        f"appeared; console tail:\n{self.tail()}")
                print(f"{self.name}: the guest's kernel panicked under TCG; killed and "
                      f"started again (the same disks). Console tail:\n{self.tail()}",
                      file=sys.stderr)
                self.kill()
                self.start()
                since, restarts_after_panic = 0, restarts_after_panic - 1
                continue
            exited = not self.running()
            if exited:
                console = self.serial(since)    # all QEMU wrote before it exited
            if exited and self.cold_reset and RESTARTING in console:
                self.cold_reset = False
                print(f"{self.name}: the guest reset the machine; QEMU exited at the reset "
                      "(restart_at_reset) and is started again (the same disks)",
                      file=sys.stderr)
                self.start()
                since = 0
                continue
            if exited:
                raise RuntimeError(f"QEMU exited before {text!r} appeared: {self.qemu_output()}\n"
                                   f"console tail:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} not on the console after {timeout} s; "
                                   f"console tail:\n{self.tail()}")
            time.sleep(0.5)

    def panicked(self):
        """When the console shows a kernel panic: saying so, with the console's tail;
        else None."""
        if PANIC in self.serial():
            return f"the guest's kernel panicked; console tail:\n{self.tail()}"
        return None

    def gone(self):
        """Why the guest can no longer serve a test (its kernel panicked, or QEMU exited),
        with the console's tail; None while it runs. A wait_for sees a panic that comes
        during the wait; this sees one that came between waits, e.g. between two tests."""
        panicked = self.panicked()
        if panicked:
            return panicked
        if not self.running():
            return (f"QEMU exited: {self.qemu_output()}\nconsole tail:\n{self.tail()}")
        return None

    def tail(self, lines=40):
        return "\n".join(self.serial().splitlines()[-lines:])

    def qemu_output(self):
        try:
            with open(self.qemu_log) as f:
                return f.read().strip()
        except OSError:
            return ""

    # -- QMP

    def qmp(self, command, **arguments):
        """Run one QMP command; returns its "return" value."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(self.qmp_path)
            f = s.makefile("rw")
            json.loads(f.readline())                       # the greeting
            for cmd in ({"execute": "qmp_capabilities"},
                        {"execute": command, **({"arguments": arguments} if arguments else {})}):
                f.write(json.dumps(cmd) + "\n")
                f.flush()
                while True:
                    reply = json.loads(f.readline())
                    if "event" not in reply:
                        break
                if "error" in reply:
                    raise RuntimeError(f"QMP {command}: {reply['error']}")
            return reply.get("return")


def unit_memory(run, units):
    """{unit: (RSS kB, PSS kB)} summed over the processes of each systemd unit of a booted
    guest; `run(command)` runs a shell command there and returns its stdout. PSS shares
    each shared page (the interpreter, libraries) among the processes that map it.
    A unit or a process that ended meanwhile is left out: an on-demand daemon stops by
    itself once idle (docs/on-demand-daemons.md), between any two of these reads."""
    out = {}
    for unit in units:
        pids = run(f"cat /sys/fs/cgroup/system.slice/{unit}.service/cgroup.procs "
                   "2>/dev/null || true").split()
        rss = pss = 0
        measured = False
        for pid in pids:
            fields = run(f"grep -E '^(Rss|Pss):' /proc/{pid}/smaps_rollup "
                         "2>/dev/null || true").split()
            if len(fields) < 5:
                continue
            rss += int(fields[1])
            pss += int(fields[4])
            measured = True
        if measured:
            out[unit] = (rss, pss)
    return out


def _format(path):
    return "raw" if path.endswith((".raw", ".img", ".iso")) else "qcow2"


def require_root():
    """Skip the calling test unless root (the build needs root; CI runs as root)."""
    import pytest
    if os.geteuid() != 0:
        pytest.skip("image tests need root: the image build uses mmdebstrap, loop mounts "
                    "and chroot (CI runs as root)")
