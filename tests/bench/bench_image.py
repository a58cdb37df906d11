"""Images: build time cold and cached, sizes per profile, node boot to marker under TCG.

    python -m tests.bench image
    BENCH_IMAGE_COLD=0 python -m tests.bench image      # keep the cache: cached builds only
    BENCH_IMAGE_PROFILES=node python -m tests.bench image

Cold means the profile's cached layers (rootfs, wheels, disk) are removed first, so the
build downloads and installs every package again; cached is the same build run again.
The boot runs the node image with a NoCloud seed whose runcmd prints a marker on the
serial console (as tests/image does), timed from QEMU's start. Needs root (the build).
Goals (issue 12): compressed appliance image < 400 MB, the node image as small as it can be.
"""

import glob
import os
import subprocess
import sys
import time

from . import ROOT, note, remove, table, temp_dir, title
from tests.image import qemu

PROFILES = os.environ.get("BENCH_IMAGE_PROFILES", "appliance,node").split(",")
COLD = os.environ.get("BENCH_IMAGE_COLD", "1") != "0"
CACHE = os.path.join(ROOT, "build", "cache")
GOAL_APPLIANCE_QCOW2_MB = 400


def timed_build(profile):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, qemu.BUILD, "--profile", profile],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"build of {profile} failed:\n{proc.stdout[-3000:]}")
    return seconds, proc.stdout


def forget(profile):
    for path in glob.glob(os.path.join(CACHE, f"*-{profile}-*")) + \
            glob.glob(os.path.join(CACHE, "wheels-*")):
        (remove if os.path.isdir(path) else os.remove)(path)


def boot_to_marker(image):
    work = temp_dir("image")
    try:
        marker = "BENCH-MARKER"
        seed = qemu.nocloud_seed(work, {
            "write_files": [{"path": "/usr/local/bin/marker", "permissions": "0755",
                             "content": f"#!/bin/sh\necho {marker} > /dev/ttyS0\n"}],
            "runcmd": [["/usr/local/bin/marker"]]})
        with qemu.VM(image.raw, work, seed=seed) as vm:
            login = vm.wait_for("login:", timeout=1800)
            total = vm.wait_for(marker, timeout=1800) + login
            vm.shutdown(120)
        return login, total
    finally:
        remove(work)


def main():
    title("image: build time, sizes, node boot under TCG")
    if os.geteuid() != 0:
        note("skipped: the image build needs root")
        return
    rows = []
    for profile in PROFILES:
        cold = None
        if COLD:
            forget(profile)
            cold, out = timed_build(profile)
            steps = [ln for ln in out.splitlines() if ": done in " in ln]
            note(f"{profile} cold build steps:\n  " + "\n  ".join(steps))
        cached, _ = timed_build(profile)
        image = qemu.Image(qemu.image_dir(profile))
        raw_mb = os.path.getsize(image.raw) / 1e6
        used_mb = os.stat(image.raw).st_blocks * 512 / 1e6
        qcow2_mb = os.path.getsize(image.qcow2) / 1e6
        rows.append([profile, f"{cold:.0f}" if cold else "-", f"{cached:.1f}",
                     f"{raw_mb:.0f}", f"{used_mb:.0f}", f"{qcow2_mb:.0f}",
                     image.info.get("root_used_mib", "-")])
    table(["profile", "cold build s", "cached build s", "raw MB", "raw allocated MB",
           "qcow2 -c MB", "root files MiB"], rows)
    for r in rows:
        if r[0] == "appliance":
            note(f"goal: appliance qcow2 < {GOAL_APPLIANCE_QCOW2_MB} MB: {r[5]} MB")
    if "node" in PROFILES:
        load1 = os.getloadavg()[0]
        login, marker = boot_to_marker(qemu.Image(qemu.image_dir("node")))
        note(f"node image under TCG with a NoCloud seed: login prompt {login:.0f} s, "
             f"runcmd marker {marker:.0f} s after QEMU's start (load average {load1:.1f})")


if __name__ == "__main__":
    main()
