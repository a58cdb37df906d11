"""The Debian 12 appliance image, built from git history, for the upgrade test from a Debian
12 appliance's state disk to the Debian 13 image (docs/image.md, "Upgrade from a Debian 12
appliance").

PREVIOUS_COMMIT is main's last commit whose recipe built on Debian 12 (bookworm, Python
3.11, PostgreSQL 15, QEMU 7.2, libvirt 9.0). Its tree is taken out with `git archive` into
build/previous-<commit>/ (once: the directory is the cache), and its own
image-build/build.py builds it there, with its own pins, its own layer cache under that
directory's build/, and whatever build code it had: what a Debian 12 appliance in the
field was made of. Its output is final (the commit never changes): once built, the
layers it was made from and its raw disk are removed, and its compressed qcow2 is what
the upgrade test boots (through an overlay), 1.6 GB less of the run's disk
(docs/testing.md, "Disk"); a later run finds the image there and builds nothing.
"""

import os
import shutil
import subprocess
import sys

from tests.image import prebuild
from tests.image.qemu import ROOT, Image

PREVIOUS_COMMIT = "2341344"
PREVIOUS_DEBIAN = "12"


def previous_tree(commit=PREVIOUS_COMMIT):
    """build/previous-<commit>/: the commit's files (no .git), made once."""
    tree = os.path.join(ROOT, "build", f"previous-{commit}")
    if os.path.exists(os.path.join(tree, "image-build", "build.py")):
        return tree
    tmp = tree + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    archive = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", commit],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {commit} failed (a shallow clone? fetch main's "
                           f"history): {archive.stderr.decode()[-500:]}")
    subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
    os.rename(tmp, tree)
    return tree


def build_previous_image(commit=PREVIOUS_COMMIT, profile="appliance", log=None):
    """The commit's image, built by the commit's build.py (its cache makes a rebuild
    instant); an Image of its build/images/<profile>/."""
    if (commit, profile) == (PREVIOUS_COMMIT, "appliance"):
        prebuild.wait_for(prebuild.PREVIOUS)
    tree = previous_tree(commit)
    out = os.path.join(tree, "build", "images", profile)
    if os.path.exists(os.path.join(out, "build-info.json")):
        trim(tree, out)             # a build of a run from before the trim
        return Image(out)
    cmd = [sys.executable, os.path.join(tree, "image-build", "build.py"), "--profile", profile]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=tree)
    (log or sys.stderr).write(proc.stdout)
    if proc.returncode != 0 and "was not found" in proc.stdout:
        # Debian's mirror keeps only a suite's newest versions: once a point release or a
        # security update replaces a pin of that commit, apt says "Version ... was not
        # found". The same recipe with its Debian packages unpinned is still a Debian 12
        # appliance of that commit (its code and Python pins unchanged)
        unpin_debian_packages(tree)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=tree)
        (log or sys.stderr).write(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"the build of {commit}'s image failed ({proc.returncode}):\n"
                           + "\n".join(proc.stdout.splitlines()[-30:]))
    trim(tree, out)
    return Image(out)


def trim(tree, out):
    """Keep of the finished build only its images: the cached layers' rootfs tars and
    wheels, the cached disks, and the raw disk (the qcow2 boots the same) go."""
    cache = os.path.join(tree, "build", "cache")
    for name in os.listdir(cache) if os.path.isdir(cache) else ():
        path = os.path.join(cache, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    raw = os.path.join(out, "disk.raw")
    if os.path.exists(raw) and os.path.exists(os.path.join(out, "disk.qcow2")):
        os.remove(raw)


def unpin_debian_packages(tree):
    """Drop the versions of the tree's Debian package lists (packages/*.txt but the
    Python pins): apt then takes the suite's current version of each."""
    packages = os.path.join(tree, "image-build", "packages")
    for name in os.listdir(packages):
        if not name.endswith(".txt") or name == "python.txt":
            continue
        path = os.path.join(packages, name)
        with open(path) as f:
            lines = f.read().splitlines()
        with open(path, "w") as f:
            f.write("\n".join(ln if ln.startswith("#") or "=" not in ln
                              else ln.split("=", 1)[0] for ln in lines) + "\n")
