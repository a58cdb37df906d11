#!/usr/bin/env python3
"""Build a bootable disk image of the appliance (or of the node profile).

    image-build/build.py [--profile appliance|node] [--version-suffix S]
                         [--extra-migrations DIR] [--refresh-pins]

The recipe is data beside this file: recipe.json (suite, sources, profiles, disk sizes),
packages/*.txt (pinned Debian packages per profile, and the venv's Python pins) and
files/common|<profile>/ (laid into the root unchanged). Three layers, each cached under
build/cache by the hash of its inputs, so that a build with nothing changed is instant:

  rootfs  mmdebstrap minbase with the pinned packages      inputs: package lists, recipe
  wheels  the repository's wheel and its dependencies      inputs: the repository's sources
  disk    venv, overlay, units, user, config, bootloader   inputs: all of the above, this
          -> raw disk + compressed qcow2                   program, suffix, migrations

Writes only under build/ (the repository's). Runs as root. docs/image.md has the design.
"""

import argparse
import contextlib
import fcntl
import glob
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, "build")
CACHE = os.path.join(BUILD, "cache")
WORK = os.path.join(BUILD, "work")
IMAGES = os.path.join(BUILD, "images")
# the repository's sources that go into the wheel: the wheel layer's inputs
SOURCES = ("pyproject.toml", "appliance", "daemons", "state")
TOOLS = ("mmdebstrap", "sfdisk", "mkfs.ext4", "extlinux", "qemu-img", "mount", "umount",
         "chroot", "tar", "mkfs.vfat", "mmd", "mcopy", "dd")
MBR = "/usr/lib/EXTLINUX/mbr.bin"
# the UEFI boot loader, from the image's own systemd-boot-efi (packages/common.txt), put
# where firmware looks on a disk it has no boot entry for: \EFI\BOOT\BOOTX64.EFI
SYSTEMD_BOOT = "usr/lib/systemd/boot/efi/systemd-bootx64.efi"
ESP_FAT_LABEL = "ESP"
KEEP = 2          # cache entries kept per layer and profile (besides the one just used)
# quiet: the kernel's messages and systemd's status lines go through an emulated UART at
# 115200 baud (TCG): tens of kilobytes, seconds of boot; failures and the appliance's
# banner still reach the console. cryptomgr.notests: the crypto API's boot self-tests.
# no_timer_check: the kernel's check that the IO-APIC timer ticks, a few loops at start,
# panicked a node under TCG on a busy hypervisor ("IO-APIC + timer doesn't work!",
# 2026-11-27): an emulated CPU starved by its host runs too few ticks in the check's
# window. Virtual machines' images commonly turn it off; a machine whose timer is broken
# shows it later anyway.
# lsm=: the kernel's own list but for bpf, whose only user here would be systemd's
# RestrictFileSystems= (no unit of the image sets it): with the BPF LSM on, systemd loads
# and attaches its BPF program at every start, ~1 s of the boot's critical chain under
# TCG before any unit runs (docs/security.md, "The kernel's security modules").
CMDLINE = ("root=LABEL={label} rw console=tty0 console=ttyS0,115200 net.ifnames=0 quiet "
           "cryptomgr.notests no_timer_check "
           "lsm=lockdown,capability,landlock,yama,apparmor,tomoyo,ipe,ima,evm")
# the wheels for Debian 13's python3 (3.13, glibc 2.41), whatever Python runs the build;
# pip does not widen a manylinux_2_N tag to older glibcs: every one is listed
PIP_DOWNLOAD = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                "--python-version", "3.13", "--implementation", "cp", "--abi", "cp313",
                *(arg for glibc in range(41, 16, -1)
                  for arg in ("--platform", f"manylinux_2_{glibc}_x86_64")),
                "--platform", "manylinux2014_x86_64"]


class BuildError(Exception):
    pass


# ---- output -------------------------------------------------------------------------------

STARTED = time.monotonic()


def say(text):
    print(f"[{time.monotonic() - STARTED:6.1f} s] {text}", flush=True)


@contextlib.contextmanager
def step(name):
    say(f"{name} ...")
    t0 = time.monotonic()
    yield
    say(f"{name}: done in {time.monotonic() - t0:.1f} s")


def run(cmd, **kw):
    """Run a command; its output is shown only when it fails."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
    return proc.stdout


# ---- the recipe ---------------------------------------------------------------------------

def load_recipe():
    with open(os.path.join(HERE, "recipe.json")) as f:
        return json.load(f)


def read_pins(name):
    """The non-comment lines of packages/<name>.txt."""
    with open(os.path.join(HERE, "packages", f"{name}.txt")) as f:
        return [ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip()]


def digest(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else json.dumps(p, sort_keys=True).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def tree_digest(*paths):
    """Hash of the files under paths (relative names, modes and contents), caches left out."""
    h = hashlib.sha256()
    for top in paths:
        if not os.path.exists(top):
            continue
        files = [top] if os.path.isfile(top) else sorted(
            os.path.join(d, f) for d, dirs, fs in os.walk(top)
            for f in fs if not f.endswith((".pyc", ".pyo")) and "__pycache__" not in d
            and ".egg-info" not in d)
        for path in files:
            h.update(os.path.relpath(path, ROOT).encode() + b"\0")
            h.update(oct(os.stat(path).st_mode & 0o777).encode())
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:16]


def mmdebstrap_command(recipe, profile, out, pinned=True):
    packages = [p for name in profile["packages"] for p in read_pins(name)]
    if not pinned:
        packages = [p.split("=")[0] for p in packages]
    cmd = ["mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar",
           "--include=" + ",".join(packages), "--aptopt=Acquire::Retries \"3\""]
    cmd += [f"--dpkgopt=path-exclude={p}" for p in recipe["dpkg_path_exclude"]]
    cmd += [f"--dpkgopt=path-include={p}" for p in recipe["dpkg_path_include"]]
    return cmd + [recipe["suite"], out] + recipe["sources"]


# ---- the cache ----------------------------------------------------------------------------

def cached(layer, key):
    return os.path.join(CACHE, f"{layer}-{key}")


def prune(layer_prefix, keep_path):
    """Keep the newest KEEP entries of a layer besides the one in use."""
    entries = sorted((p for p in glob.glob(os.path.join(CACHE, layer_prefix + "-*"))
                      if p != keep_path and not p.endswith(".tmp")),
                     key=os.path.getmtime, reverse=True)
    for old in entries[KEEP:]:
        (shutil.rmtree if os.path.isdir(old) else os.remove)(old)


@contextlib.contextmanager
def fresh(path):
    """A temporary path beside `path`, renamed onto it when the block succeeds."""
    tmp = path + ".tmp"
    remove(tmp)
    try:
        yield tmp
        os.rename(tmp, path)
    finally:
        remove(tmp)


@contextlib.contextmanager
def locked(name):
    """build/.lock-<name>, held for the block. A profile's builds (its suffixes too) share
    its work tree and its layers, so they go one at a time; two profiles' builds run side
    by side (the suite needs both profiles at once: docs/image.md, "Builds side by side",
    with what that was measured to gain). The wheels layer, which every profile uses, has
    a lock of its own, taken inside a profile's."""
    with open(os.path.join(BUILD, f".lock-{name}"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


# ---- layer 1: the root file system --------------------------------------------------------

def rootfs_layer(recipe, name, profile, refresh=False):
    cmd = mmdebstrap_command(recipe, profile, "OUT", pinned=not refresh)
    key = digest("rootfs", cmd)
    path = cached(f"rootfs-{name}", key) + ".tar"
    if os.path.exists(path) and not refresh:
        say(f"rootfs ({name}, {key}): cached")
        os.utime(path)
        return key, path
    with step(f"rootfs ({name}, {key}): mmdebstrap"), fresh(path) as tmp:
        run([tmp if a == "OUT" else a for a in cmd])
    prune(f"rootfs-{name}", path)
    return key, path


# ---- layer 2: the wheels ------------------------------------------------------------------

def appliance_wheel(dest):
    """This repository's wheel, built from a copy: setuptools writes build/ and *.egg-info
    beside the sources it builds."""
    src = os.path.join(WORK, "wheel-src")
    remove(src)
    os.makedirs(src)
    try:
        for s in SOURCES:
            (shutil.copy2 if os.path.isfile(os.path.join(ROOT, s)) else shutil.copytree)(
                os.path.join(ROOT, s), os.path.join(src, s))
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dest, src])
    finally:
        remove(src)
    return glob.glob(os.path.join(dest, "appliance-*.whl"))[0]


def wheels_layer():
    pins = read_pins("python")
    key = digest("wheels", tree_digest(*(os.path.join(ROOT, s) for s in SOURCES)), pins)
    path = cached("wheels", key)
    if os.path.isdir(path):
        say(f"wheels ({key}): cached")
        os.utime(path)
        return key, path
    with step(f"wheels ({key}): the appliance wheel and its dependencies"), fresh(path) as tmp:
        os.makedirs(tmp)
        constraints = os.path.join(tmp, "constraints.txt")
        with open(constraints, "w") as f:
            f.write("\n".join(pins) + "\n")
        run([*PIP_DOWNLOAD, "-d", tmp, "-c", constraints, appliance_wheel(tmp)])
    prune("wheels", path)
    return key, path


# ---- layer 3: the disk --------------------------------------------------------------------

def disk_key(recipe, name, rootfs_key, wheels_key, suffix, migrations):
    files = [os.path.join(HERE, "files", "common"), os.path.join(HERE, "files", name),
             os.path.join(ROOT, "systemd"), os.path.join(ROOT, "docs"), os.path.abspath(__file__)]
    return digest("disk", recipe["profiles"][name], recipe["appliance_uid"], recipe["mask"],
                  rootfs_key,
                  wheels_key, suffix or "", tree_digest(*files),
                  tree_digest(migrations) if migrations else "")


@contextlib.contextmanager
def mounted(*args):
    target = args[-1]
    run(["mount", *args])
    try:
        yield target
    finally:
        run(["umount", target])


def chroot(root, *cmd):
    return run(["chroot", root, *cmd], env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                            "LC_ALL": "C.UTF-8", "HOME": "/root"})


def install_venv(root, wheels, profile, migrations):
    venv = "/opt/appliance/venv"
    staging = os.path.join(root, "tmp", "wheels")
    shutil.copytree(wheels, staging)
    try:
        with mounted("-t", "proc", "proc", os.path.join(root, "proc")):
            chroot(root, "python3", "-m", "venv", *(["--system-site-packages"]
                   if profile["venv_system_site_packages"] else []), venv)
            chroot(root, f"{venv}/bin/python", "-m", "pip", "install", "-q", "--no-index",
                   "--no-cache-dir", "--find-links", "/tmp/wheels",
                   "-c", "/tmp/wheels/constraints.txt", "appliance")
        # pip compiled the venv and Debian's postinst the system Python, but a .pyc whose
        # source changed after it (Debian's sitecustomize.py, a symlink into /etc) would be
        # recompiled at every start of every process: the units cannot write the root
        for path in glob.glob(os.path.join(root, "usr/lib/python3*/sitecustomize.py")):
            chroot(root, "python3", "-m", "compileall", "-q", "/" + os.path.relpath(path, root))
    finally:
        remove(staging)
    if migrations:
        site = glob.glob(os.path.join(root, venv.lstrip("/"), "lib", "python3*",
                                      "site-packages", "appliance"))[0]
        target = os.path.join(site, "migrations")
        os.makedirs(target, exist_ok=True)
        for f in sorted(os.listdir(migrations)):
            if os.path.isfile(os.path.join(migrations, f)):
                shutil.copy2(os.path.join(migrations, f), target)
                say(f"  extra migration {f}")
    # the docs the units point at (Documentation=file:/opt/appliance/docs/...)
    shutil.copytree(os.path.join(ROOT, "docs"), os.path.join(root, "opt/appliance/docs"))


def lay_overlay(src, root):
    """Copy a files/ tree into the root: contents and modes, owned by root."""
    if not os.path.isdir(src):
        return
    for d, dirs, files in os.walk(src):
        rel = os.path.relpath(d, src)
        target = os.path.normpath(os.path.join(root, rel))
        os.makedirs(target, exist_ok=True)
        for f in files:
            dst = os.path.join(target, f)
            remove(dst)
            shutil.copy2(os.path.join(d, f), dst)
            os.chown(dst, 0, 0)


def configure(recipe, name, profile, root, info):
    uid = recipe["appliance_uid"]
    with open(os.path.join(root, "etc/hostname"), "w") as f:
        f.write(profile["hostname"] + "\n")
    with open(os.path.join(root, "etc/hosts"), "w") as f:
        f.write(f"127.0.0.1\tlocalhost\n127.0.1.1\t{profile['hostname']}\n"
                "::1\tlocalhost ip6-localhost ip6-loopback\n")
    # every machine made from the image gets its own id and SSH host keys at first boot;
    # an empty machine-id (not "uninitialized") skips systemd's first-boot preset-all,
    # 20 s under TCG, which would also enable units that the image leaves disabled
    with open(os.path.join(root, "etc/machine-id"), "w") as f:
        pass
    remove(os.path.join(root, "var/lib/dbus/machine-id"))
    for key in glob.glob(os.path.join(root, "etc/ssh/ssh_host_*")):
        os.remove(key)
    with open(os.path.join(root, "etc/fstab"), "w") as f:
        f.write(f"LABEL={profile['root_label']}\t/\text4\tdefaults,errors=remount-ro\t0\t1\n")
    if profile["user"]:
        # a fixed uid: the state disk outlives the root file system (upgrades)
        chroot(root, "groupadd", "--system", "--gid", str(uid), "appliance")
        chroot(root, "useradd", "--system", "--uid", str(uid), "--gid", "appliance",
               "--home-dir", "/var/lib/appliance", "--no-create-home",
               "--shell", "/usr/sbin/nologin", "appliance")
        groups = [g for g in ("libvirt", "kvm") if f"\n{g}:" in "\n" + open(
            os.path.join(root, "etc/group")).read()]
        if groups:
            chroot(root, "usermod", "-a", "-G", ",".join(groups), "appliance")
        state = os.path.join(root, "var/lib/appliance")
        os.makedirs(state, exist_ok=True)
        os.chown(state, uid, uid)
        os.chmod(state, 0o750)
    lay_overlay(os.path.join(HERE, "files", "common"), root)
    lay_overlay(os.path.join(HERE, "files", name), root)
    units = sorted(os.listdir(os.path.join(ROOT, "systemd"))) if profile["units"] == "all" \
        else profile["units"]
    for unit in units:
        if unit.endswith((".service", ".target", ".timer", ".mount", ".path")):
            shutil.copy2(os.path.join(ROOT, "systemd", unit),
                         os.path.join(root, "etc/systemd/system", unit))
    chroot(root, "systemctl", "enable", "--quiet", *profile["enable"])
    # what neither machine uses, each a step of a boot under TCG (docs/image.md, "Boot time")
    chroot(root, "systemctl", "mask", "--quiet", *recipe["mask"], *profile.get("mask", []))
    # generators that would find nothing here (no GPT auto-partitions, hibernation, SysV
    # scripts without a unit, TPM, Debian PostgreSQL clusters...), each a process start
    # before any unit under TCG, on the boot's critical chain: masked as systemd documents
    # it, a link to /dev/null of the same name in /etc (docs/image.md, "Boot time")
    generators = os.path.join(root, "etc/systemd/system-generators")
    os.makedirs(generators, exist_ok=True)
    for name in recipe["mask_generators"]:
        link = os.path.join(generators, name)
        if not os.path.lexists(link):
            os.symlink("/dev/null", link)
    for path in profile.get("remove", []):
        remove(os.path.join(root, path))
    # a certificate's hash link left dangling by the list above (ssl-cert's snakeoil pair:
    # one private key in every machine made from the image); CA links are absolute
    for link in glob.glob(os.path.join(root, "etc/ssl/certs/*.0")):
        target = os.readlink(link) if os.path.islink(link) else "/"
        if not target.startswith("/") and not os.path.exists(link):
            os.remove(link)
    decompress_modules(root)
    # the initramfs of files/common/etc/initramfs-tools (MODULES=list): the rootfs layer's
    # holds most of the kernel's drivers
    with mounted("-t", "proc", "proc", os.path.join(root, "proc")):
        chroot(root, "update-initramfs", "-u", "-k", "all")
    os.makedirs(os.path.join(root, "etc/appliance"), exist_ok=True)
    with open(os.path.join(root, "etc/appliance/build-info.json"), "w") as f:
        json.dump(info, f, indent=2)
    # the bootloader's menu: the kernel and initrd of this root
    kernel, initrd = boot_files(root)
    os.makedirs(os.path.join(root, "boot/extlinux"), exist_ok=True)
    with open(os.path.join(root, "boot/extlinux/extlinux.conf"), "w") as f:
        f.write(f"DEFAULT linux\nPROMPT 0\nTIMEOUT 0\nLABEL linux\n"
                f"  LINUX /boot/{os.path.basename(kernel)}\n"
                f"  INITRD /boot/{os.path.basename(initrd)}\n"
                f"  APPEND {CMDLINE.format(label=profile['root_label'])}\n")
    for junk in ("var/cache/apt", "var/lib/apt/lists", "tmp", "var/tmp", "root/.cache"):
        for p in glob.glob(os.path.join(root, junk, "*")):
            remove(p)
    chroot(root, "ldconfig")
    mark_updated(root)


UPDATED = ("# This file was created by systemd-update-done. Its only\n"
           "# purpose is to hold a timestamp of the time this directory\n"
           "# was updated. See man:systemd-update-done.service(8).\n"
           "TIMESTAMP_NSEC={}\n")


def mark_updated(root):
    """/etc/.updated and /var/.updated as systemd-update-done writes them: the root is
    up to date with its /usr. Without them every first boot of a new root ran the
    `ConditionNeedsUpdate=` units (ldconfig.service, 3.4 s on the boot's critical chain
    under TCG, then systemd-update-done), to remake what the build just made (the
    ld.so cache above; the rest, dpkg's triggers made in the rootfs layer)."""
    usr = os.lstat(os.path.join(root, "usr"))
    for folder in ("etc", "var"):
        path = os.path.join(root, folder, ".updated")
        with open(path, "w") as f:
            f.write(UPDATED.format(usr.st_mtime_ns))
        os.utime(path, ns=(usr.st_mtime_ns, usr.st_mtime_ns))


def partitions(profile):
    """[(name, first MiB, MiB)] in the profile's `layout` order, from 1 MiB on: the
    partitions' numbers are their places in the list (docs/image.md, "Disk layout")."""
    sizes = {"root": profile["root_mib"], "esp": profile["esp_mib"],
             "state": profile["state_mib"]}
    out, start = [], 1
    for name in profile["layout"]:
        out.append((name, start, sizes[name]))
        start += sizes[name]
    return out


def decompress_modules(root):
    """Store the kernel's modules uncompressed (Debian ships them xz-compressed), then
    rebuild modules.dep for the new names. Under TCG each load of an xz module took ~0.1 s
    more than the same module uncompressed (185-233 ms against 88-93 ms for dm_mod), and a
    boot loads some 25 (udev's coldplug, systemd's own, the initramfs'), mostly on the way
    to the state picker. The signature is part of the module and stays. Costs ~90 MB more
    of the root (25 to 118 MiB of modules), not of the compressed qcow2 (docs/boot.md,
    "Less work before the API")."""
    versions = []
    for top in glob.glob(os.path.join(root, "usr/lib/modules/*")):
        versions.append(os.path.basename(top))
        for folder, _, files in os.walk(top):
            for name in files:
                if name.endswith(".ko.xz"):
                    path = os.path.join(folder, name)
                    with lzma.open(path) as f:
                        data = f.read()
                    with open(path[:-3], "wb") as f:
                        f.write(data)
                    shutil.copystat(path, path[:-3])
                    os.remove(path)
    for version in versions:
        chroot(root, "depmod", "-a", version)


def boot_files(root):
    """The newest kernel and initrd of the root (paths inside it)."""
    kernel = sorted(glob.glob(os.path.join(root, "boot/vmlinuz-*")))[-1]
    initrd = sorted(glob.glob(os.path.join(root, "boot/initrd.img-*")))[-1]
    return kernel, initrd


def make_esp(profile, name, root, path, title):
    """The EFI system partition as a FAT file system in its own file, made and filled
    without a mount (mkfs.vfat, then mtools: this host's kernel cannot mount vfat):
    systemd-boot as the removable-media loader, and one loader entry booting copies of
    the root's kernel and initrd with the same command line as extlinux's menu."""
    with open(path, "wb") as f:
        f.truncate(profile["esp_mib"] * 1024 * 1024)
    run(["mkfs.vfat", "-F", "32", "-n", ESP_FAT_LABEL, path])
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    run(["mmd", "-i", path, "::/EFI", "::/EFI/BOOT", "::/loader", "::/loader/entries",
         f"::/{name}"], env=env)
    kernel, initrd = boot_files(root)
    staging = path + ".d"
    remove(staging)
    os.makedirs(staging)
    try:
        # timeout 0: no menu (a key held at boot shows it); editor no: the command line
        # cannot be edited at the console (init=/bin/sh would be a root shell)
        with open(os.path.join(staging, "loader.conf"), "w") as f:
            f.write(f"default {name}.conf\ntimeout 0\neditor no\n")
        with open(os.path.join(staging, "entry.conf"), "w") as f:
            f.write(f"title {title}\n"
                    f"linux /{name}/{os.path.basename(kernel)}\n"
                    f"initrd /{name}/{os.path.basename(initrd)}\n"
                    f"options {CMDLINE.format(label=profile['root_label'])}\n")
        for src, dst in ((os.path.join(root, SYSTEMD_BOOT), "::/EFI/BOOT/BOOTX64.EFI"),
                         (os.path.join(staging, "loader.conf"), "::/loader/loader.conf"),
                         (os.path.join(staging, "entry.conf"), f"::/loader/entries/{name}.conf"),
                         (kernel, f"::/{name}/{os.path.basename(kernel)}"),
                         (initrd, f"::/{name}/{os.path.basename(initrd)}")):
            run(["mcopy", "-i", path, src, dst], env=env)
    finally:
        remove(staging)


def make_disk(profile, name, uid, root, raw, title):
    """The raw disk, one MBR for both firmwares: extlinux's MBR code and the bootable root
    partition (BIOS), the EFI system partition with systemd-boot (UEFI), and the state
    partition (if any) last."""
    mib = 1024 * 1024
    layout = partitions(profile)
    root_mib = profile["root_mib"]
    used = int(run(["du", "-sxm", root]).split()[0])
    if used * 1.15 + 64 > root_mib:
        raise BuildError(f"the root tree is {used} MiB; root_mib {root_mib} in recipe.json "
                         "is too small")
    _, last_start, last_mib = layout[-1]
    with open(raw, "wb") as f:
        f.truncate((last_start + last_mib) * mib)
    kinds = {"root": "type=83, bootable", "esp": "type=ef", "state": "type=83"}
    run(["sfdisk", "--quiet", raw], input="label: dos\n" + "".join(
        f"start={start}MiB, size={size}MiB, {kinds[part]}\n" for part, start, size in layout))
    at = {part: start for part, start, _ in layout}
    run(["mkfs.ext4", "-q", "-L", profile["root_label"], "-d", root,
         "-E", f"offset={at['root'] * mib}", raw, f"{root_mib}M"])
    mnt = os.path.join(WORK, f"mnt-{name}")
    os.makedirs(mnt, exist_ok=True)
    with mounted("-o", f"loop,offset={at['root'] * mib},sizelimit={root_mib * mib}", raw, mnt):
        run(["extlinux", "--install", os.path.join(mnt, "boot/extlinux")])
    esp = os.path.join(WORK, f"esp-{name}.img")
    try:
        make_esp(profile, name, root, esp, title)
        run(["dd", f"if={esp}", f"of={raw}", "bs=1M", f"seek={at['esp']}",
             "conv=notrunc,sparse", "status=none"])
    finally:
        remove(esp)
    if "state" in at:
        run(["mkfs.ext4", "-q", "-L", profile["state_label"],
             "-E", f"offset={at['state'] * mib},root_owner={uid}:{uid}",
             raw, f"{profile['state_mib']}M"])
    with open(MBR, "rb") as f:
        mbr = f.read(440)
    with open(raw, "r+b") as f:
        f.write(mbr)
    return used


def disk_layer(recipe, name, profile, rootfs, wheels, suffix, migrations, keep_raw=True):
    rootfs_key, rootfs_tar = rootfs
    wheels_key, wheels_dir = wheels
    key = disk_key(recipe, name, rootfs_key, wheels_key, suffix, migrations)
    path = cached(f"disk-{name}", key)
    if os.path.isdir(path) and keep_raw and not os.path.exists(os.path.join(path, "disk.raw")):
        say(f"disk ({name}, {key}): cached without its raw disk (--no-raw): made again")
        remove(path)
    if os.path.isdir(path):
        say(f"disk ({name}, {key}): cached")
        os.utime(path)
        return key, path, None
    info = {"profile": name, "version": version(suffix), "recipe_hash": key,
            "rootfs_hash": rootfs_key, "wheels_hash": wheels_key,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    root = os.path.join(WORK, f"root-{name}")
    with fresh(path) as tmp:
        os.makedirs(tmp)
        remove(root)
        os.makedirs(root)
        try:
            with step("disk: unpack the root file system"):
                run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf",
                     rootfs_tar, "-C", root])
            with step("disk: the venv from the wheels"):
                install_venv(root, wheels_dir, profile, migrations)
            with step("disk: user, overlay files, units, config, bootloader menu"):
                configure(recipe, name, profile, root, info)
            with step("disk: partitions, file systems, extlinux, the EFI system partition"):
                used = make_disk(profile, name, recipe["appliance_uid"], root,
                                 os.path.join(tmp, "disk.raw"), f"{name} {info['version']}")
                info["root_used_mib"] = used
                info["venv_mib"] = int(run(["du", "-sm", os.path.join(root, "opt/appliance")])
                                       .split()[0])
                info["modules_mib"] = int(run(["du", "-sm", os.path.join(root, "usr/lib/modules")])
                                          .split()[0])
        finally:
            remove(root)
        with step("disk: compressed qcow2"):
            # zstd rather than qcow2's default zlib: 5.7 s against 27.6 s of CPU for the
            # appliance's disk, 2% smaller, and faster to read back (docs/image.md)
            run(["qemu-img", "convert", "-c", "-o", "compression_type=zstd",
                 "-f", "raw", "-O", "qcow2",
                 os.path.join(tmp, "disk.raw"), os.path.join(tmp, "disk.qcow2")])
        if not keep_raw:
            os.remove(os.path.join(tmp, "disk.raw"))
        with open(os.path.join(tmp, "build-info.json"), "w") as f:
            json.dump(info, f, indent=2)
    prune(f"disk-{name}", path)
    return key, path, info


def version(suffix):
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        base = next(ln.split("=")[1].strip().strip('"') for ln in f
                    if ln.startswith("version"))
    return base + (f"+{suffix}" if suffix else "")


def publish(path, name, suffix):
    """build/images/<profile>[-suffix]/: hard links to the cached disk layer."""
    out = os.path.join(IMAGES, name + (f"-{suffix}" if suffix else ""))
    tmp = out + ".tmp"
    remove(tmp)
    os.makedirs(tmp)
    for f in os.listdir(path):
        os.link(os.path.join(path, f), os.path.join(tmp, f))
    remove(out)
    os.rename(tmp, out)
    return out


def size_report(out):
    def mib(n):
        return f"{n / 1024 / 1024:8.1f} MiB"
    raw, qcow2 = os.path.join(out, "disk.raw"), os.path.join(out, "disk.qcow2")
    with open(os.path.join(out, "build-info.json")) as f:
        info = json.load(f)
    print(f"size report ({info['profile']} {info['version']}, recipe {info['recipe_hash']}):")
    if os.path.exists(raw):
        print(f"  raw disk      {mib(os.path.getsize(raw))} (allocated {mib(os.stat(raw).st_blocks * 512).strip()})")
    else:
        print("  raw disk      not kept (--no-raw)")
    print(f"  qcow2 (-c)    {mib(os.path.getsize(qcow2))}")
    for k, label in (("root_used_mib", "root files  "), ("venv_mib", "/opt/appliance"),
                     ("modules_mib", "kernel modules")):
        if k in info:
            print(f"  {label:14}{info[k]:8d} MiB")
    print(f"  images in {os.path.relpath(out, ROOT)}/")


# ---- pins ---------------------------------------------------------------------------------

def refresh_pins(recipe, name, profile, rootfs_tar):
    """Rewrite packages/<list>.txt with the versions that the unpinned build installed."""
    listing = run(["tar", "-xOf", rootfs_tar, "./var/lib/dpkg/status"])
    installed, pkg = {}, None
    for ln in listing.splitlines():
        if ln.startswith("Package: "):
            pkg = ln.split(": ", 1)[1]
        elif ln.startswith("Version: ") and pkg:
            installed[pkg] = ln.split(": ", 1)[1]
    for lst in profile["packages"]:
        path = os.path.join(HERE, "packages", f"{lst}.txt")
        with open(path) as f:
            lines = f.read().splitlines()
        out = []
        for ln in lines:
            bare = ln.split("#")[0].strip()
            if bare:
                pkg = bare.split("=")[0]
                if pkg not in installed:
                    raise BuildError(f"{pkg} (packages/{lst}.txt) is not installed")
                ln = f"{pkg}={installed[pkg]}"
            out.append(ln)
        with open(path, "w") as f:
            f.write("\n".join(out) + "\n")
        say(f"pins: packages/{lst}.txt rewritten")


def refresh_python_pins():
    with tempfile.TemporaryDirectory(dir=BUILD) as tmp:
        run([*PIP_DOWNLOAD, "-d", tmp, appliance_wheel(tmp)])
        # wheel file names: <name>-<version>-...; pins sorted by name
        pins = [f"{n}=={v}" for n, v in sorted(
            (w.split("-")[0].replace("_", "-").lower(), w.split("-")[1])
            for w in os.listdir(tmp) if w.endswith(".whl") and not w.startswith("appliance-"))]
    path = os.path.join(HERE, "packages", "python.txt")
    with open(path) as f:
        head = [ln for ln in f.read().splitlines() if ln.startswith("#")]
    with open(path, "w") as f:
        f.write("\n".join(head + pins) + "\n")
    say("pins: packages/python.txt rewritten")


# ---- main ---------------------------------------------------------------------------------

def check_host():
    if os.geteuid() != 0:
        raise BuildError("the image build must run as root (mmdebstrap, loop mounts, chroot)")
    missing = [t for t in TOOLS if not shutil.which(t)] + \
        ([MBR] if not os.path.exists(MBR) else [])
    if missing:
        raise BuildError(f"missing on this host: {', '.join(missing)} (Debian: apt-get install "
                         "mmdebstrap extlinux syslinux-common qemu-utils fdisk e2fsprogs "
                         "dosfstools mtools)")


def parse(argv, recipe):
    p = argparse.ArgumentParser(prog="image-build/build.py", description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="appliance",
                   help=f"one of {', '.join(recipe['profiles'])} (default appliance)")
    p.add_argument("--version-suffix", metavar="S",
                   help="a newer build's version label (written to build-info.json)")
    p.add_argument("--extra-migrations", metavar="DIR",
                   help="files copied into the installed package's appliance/migrations/")
    p.add_argument("--no-raw", action="store_true",
                   help="keep only the compressed qcow2 (a build that is only booted through "
                        "an overlay or served as a VM image: the raw disk is most of the space)")
    p.add_argument("--refresh-pins", action="store_true",
                   help="build the rootfs unpinned and rewrite packages/*.txt with what it got")
    args = p.parse_args(argv)
    if args.profile not in recipe["profiles"]:
        p.error(f"unknown profile {args.profile!r}: choose from {', '.join(recipe['profiles'])}")
    if args.version_suffix is not None and not args.version_suffix.replace(".", "").replace(
            "-", "").isalnum():
        p.error(f"--version-suffix {args.version_suffix!r}: letters, digits, '.' and '-' only")
    if args.extra_migrations and not os.path.isdir(args.extra_migrations):
        p.error(f"--extra-migrations {args.extra_migrations!r} is not a directory")
    if args.extra_migrations:
        args.extra_migrations = os.path.abspath(args.extra_migrations)
    return args


def main(argv=None):
    recipe = load_recipe()
    args = parse(sys.argv[1:] if argv is None else argv, recipe)
    name, profile = args.profile, recipe["profiles"][args.profile]
    try:
        check_host()
        os.makedirs(CACHE, exist_ok=True)
        os.makedirs(WORK, exist_ok=True)
        with locked(name):
            say(f"build of the {name} image{f' ({args.version_suffix})' if args.version_suffix else ''}")
            if args.refresh_pins:
                key, tar = rootfs_layer(recipe, name, profile, refresh=True)
                refresh_pins(recipe, name, profile, tar)
                refresh_python_pins()
                remove(tar)
                return 0
            rootfs = rootfs_layer(recipe, name, profile)
            with locked("wheels"):
                wheels = wheels_layer()
            _, path, _ = disk_layer(recipe, name, profile, rootfs, wheels,
                                    args.version_suffix, args.extra_migrations,
                                    keep_raw=not args.no_raw)
            out = publish(path, name, args.version_suffix)
            say(f"build done in {time.monotonic() - STARTED:.1f} s")
            size_report(out)
    except BuildError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
