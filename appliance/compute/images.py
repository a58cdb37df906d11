"""The image cache: each image URL is downloaded once into `<dir>/<sha256(url)>.<fmt>`.

A download goes to a `.part` file, is decompressed on the way (`.gz` by gzip, `.zst` by
the `zstd` program: no Python binding needed for a format seen rarely), checked, and only
then renamed into place, so a file under its final name is always whole and a crash leaves
at most a `.part` (swept at the next try). Beside it, `<key>.json` records the URL, the
format, the size and the sha256 of the cached file.

Formats: by the URL's suffix, `.qcow2` (checked by its magic), else raw (`.raw`, `.img`,
`.raw.gz`, `.raw.zst`...), which must be a non-empty whole number of 512-byte sectors and
not secretly a qcow2 (then it is taken as qcow2). A bad file, an unreachable URL or an HTTP
error raise ImageError with a reason for the node; every network read has a timeout and the
whole download a deadline, so a stuck server cannot hang the daemon.
"""

import gzip
import hashlib
import json
import os
import subprocess
import threading
import time
import urllib.parse

from appliance import kinds
from appliance.tenancy import addresses, fetch
from appliance.tenancy.addresses import PLATFORM

QCOW2_MAGIC = b"QFI\xfb"
CHUNK = 1 << 20


# an image named by a repository artifact rather than a URL: the artifact's path
ARTIFACT_PREFIX = "/v1/repo/artifacts/"
ARTIFACT_CATEGORY = "images"


class ImageError(Exception):
    """An image cannot be had; the message is the node's status_reason."""


def artifact_uuid(image):
    """The artifact's uuid when `image` names a repository artifact, else None."""
    if isinstance(image, str) and image.startswith(ARTIFACT_PREFIX):
        return image[len(ARTIFACT_PREFIX):].strip("/") or None
    return None


def is_image_artifact(record):
    return record is not None and str(record.get("urn", "")).startswith(
        ARTIFACT_CATEGORY + ":")


def resolve(store, image):
    """The URL to download `image` from: itself, or the URI of the repository artifact it
    names (read at each download, so a repository moved to a new URI is followed)."""
    uuid = artifact_uuid(image)
    if uuid is None:
        return image
    record = store.collection(kinds.REPO_ARTIFACTS).get(uuid)
    if not is_image_artifact(record):
        raise ImageError(f"image {image}: no repository artifact of category "
                         f"{ARTIFACT_CATEGORY} (was its element removed?)")
    return record["uri"]


def reach_for(store, settings, node, image):
    """The addresses.Reach a node's image is fetched with: the platform's for what only
    the platform chooses (file://, which only platform callers may write; the images the
    settings lb_image and sqldb_image name; a platform repository's artifact), else the
    rule of the project that owns the choice (the artifact's, or the node's)."""
    uuid = artifact_uuid(image)
    if uuid is not None:
        record = store.collection(kinds.REPO_ARTIFACTS).get(uuid) or {}
        project = record.get("project_id") or node.get("project_id")
        return addresses.for_project(store, settings, project)
    if urllib.parse.urlsplit(image).scheme.lower() == "file":
        return PLATFORM
    if image in (settings.get("lb_image"), settings.get("sqldb_image")):
        return PLATFORM
    if any(v.get("image") == image for v in store.collection(kinds.SQLDB_VERSIONS).records()):
        return PLATFORM
    return addresses.for_project(store, settings, node.get("project_id"))


class ImageCache:
    """The cache directory; one download at a time per URL (others wait for it)."""

    def __init__(self, directory, read_timeout=30.0, deadline=1800.0):
        self.directory = directory
        self.read_timeout = read_timeout
        self.deadline = deadline
        self._locks = {}
        self._guard = threading.Lock()

    def key(self, url):
        return hashlib.sha256(url.encode()).hexdigest()

    def cached(self, url):
        """The record of a cached URL ({"url", "path", "format", "size", "sha256"}) or None."""
        try:
            with open(os.path.join(self.directory, self.key(url) + ".json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return None
        return meta if os.path.exists(meta.get("path", "")) else None

    def get(self, url, reach=PLATFORM):
        """The cached image of `url`, downloading it first if needed. `reach` (the
        addresses.Reach the node's project has for this URL, see `reach_for`) is checked
        first, also for a URL cached already: a project must not receive, from the
        cache, the disk of a URL it may not fetch."""
        try:
            fetch.check_url(url, reach)
        except fetch.FetchError as e:
            raise ImageError(f"image {e}") from None
        meta = self.cached(url)
        if meta is not None:
            return meta
        with self._guard:
            lock = self._locks.setdefault(url, threading.Lock())
        with lock:
            meta = self.cached(url)
            return meta if meta is not None else self._download(url, reach)

    def _download(self, url, reach):
        os.makedirs(self.directory, mode=0o755, exist_ok=True)
        key = self.key(url)
        part = os.path.join(self.directory, key + ".part")
        path_only = urllib.parse.urlsplit(url).path.lower()
        try:
            _fetch(url, path_only, part, reach, self.read_timeout, self.deadline)
            fmt = _check(part, path_only, url)
            digest = _sha256(part)
            final = os.path.join(self.directory, f"{key}.{fmt}")
            os.chmod(part, 0o644)   # the hypervisor's QEMU reads it as a backing file
            os.replace(part, final)
        finally:
            if os.path.exists(part):
                os.unlink(part)
        meta = {"url": url, "path": final, "format": fmt, "size": os.path.getsize(final),
                "virtual_size": _virtual_size(final, fmt), "sha256": digest}
        _write_meta(os.path.join(self.directory, key + ".json"), meta)
        return meta


def _write_meta(path, meta):
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(meta, f)
    os.replace(tmp, path)


def _fetch(url, path_only, part, reach, read_timeout, deadline):
    """`url` downloaded into `part`, decompressed by its suffix, within `deadline`."""
    started = time.monotonic()
    try:
        # the guarded fetcher: resolved once, checked, connected to the checked
        # address, bounded in time (the size of an image is not bounded here: its
        # hypervisor's disk is)
        response = fetch.open_url(url, reach, 0, deadline, timeout=read_timeout)
    except fetch.FetchError as e:
        raise ImageError(f"image {e}") from None
    try:
        with response, open(part, "wb") as out:
            if path_only.endswith(".zst"):
                _unzstd(response, out, url, started, read_timeout, deadline)
            else:
                src = gzip.GzipFile(fileobj=response) if path_only.endswith(".gz") \
                    else response
                _copy(src, out, url, started, deadline)
    except fetch.FetchError as e:
        raise ImageError(f"image {e}") from None
    except (OSError, EOFError) as e:    # BadGzipFile and socket timeouts are OSErrors
        raise ImageError(f"image {url}: download or decompression failed: {e}") from None


def _copy(src, out, url, started, deadline):
    while True:
        chunk = src.read(CHUNK)
        if not chunk:
            return
        out.write(chunk)
        if time.monotonic() - started > deadline:
            raise ImageError(f"image {url}: download took longer than {deadline:g} s")


def _unzstd(response, out, url, started, read_timeout, deadline):
    proc = subprocess.Popen(["zstd", "-d", "-q", "-c"], stdin=subprocess.PIPE, stdout=out,
                            stderr=subprocess.PIPE)
    try:
        _copy(response, proc.stdin, url, started, deadline)
        proc.stdin.close()
        err = proc.stderr.read()
        if proc.wait(timeout=read_timeout) != 0:
            raise ImageError(f"image {url}: not valid zstd data: "
                             f"{err.decode(errors='replace').strip()[:200]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _check(path, path_only, url):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if head == QCOW2_MAGIC:
        return "qcow2"
    if path_only.endswith(".qcow2"):
        raise ImageError(f"image {url}: not a qcow2 file (bad magic)")
    if size == 0:
        raise ImageError(f"image {url}: empty file")
    if size % 512:
        raise ImageError(f"image {url}: not a disk image: {size} bytes is not a whole "
                         "number of 512-byte sectors")
    return "raw"


def _virtual_size(path, fmt):
    """Bytes the guest sees: a raw file's size, or a qcow2 header's size field."""
    if fmt == "raw":
        return os.path.getsize(path)
    with open(path, "rb") as f:
        header = f.read(32)
    return int.from_bytes(header[24:32], "big") if len(header) == 32 else 0


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()
