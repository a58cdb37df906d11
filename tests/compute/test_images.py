"""The image cache (appliance/compute/images.py), images served over a real Waitress server
on loopback from a temp dir."""

import gzip
import hashlib
import os
import socket
import subprocess
import threading

import pytest

from appliance.compute.images import ImageCache, ImageError
from tests.compute.reconcile_helpers import image_app
from tests.wsgiserver import LoopbackServer

RAW = b"\x00" * 510 + b"\x55\xaa" + bytes(range(256)) * 256


@pytest.fixture
def served(tmp_path):
    d = tmp_path / "served"
    d.mkdir()
    hits = []
    srv = LoopbackServer(image_app(str(d), hits)).start()
    yield d, hits, lambda name: f"http://127.0.0.1:{srv.port}/{name}"
    srv.stop()


def test_raw_downloaded_once_with_checksum_and_no_part_left(served, tmp_path):
    d, hits, url = served
    (d / "a.raw").write_bytes(RAW)
    cache = ImageCache(str(tmp_path / "cache"))
    meta = cache.get(url("a.raw"))
    assert meta["format"] == "raw" and meta["sha256"] == hashlib.sha256(RAW).hexdigest()
    assert open(meta["path"], "rb").read() == RAW
    assert cache.get(url("a.raw")) == meta
    assert ImageCache(str(tmp_path / "cache")).get(url("a.raw")) == meta  # a new process
    assert hits == ["a.raw"]
    assert not [f for f in os.listdir(tmp_path / "cache") if f.endswith(".part")]


def test_gz_and_zst_are_decompressed(served, tmp_path):
    d, _hits, url = served
    (d / "a.raw.gz").write_bytes(gzip.compress(RAW))
    (d / "a.raw").write_bytes(RAW)
    subprocess.run(["zstd", "-q", str(d / "a.raw"), "-o", str(d / "a.raw.zst")], check=True)
    cache = ImageCache(str(tmp_path / "cache"))
    for name in ("a.raw.gz", "a.raw.zst"):
        meta = cache.get(url(name))
        assert open(meta["path"], "rb").read() == RAW and meta["format"] == "raw"


def test_qcow2_recognised_by_its_magic(served, tmp_path):
    d, _hits, url = served
    (d / "a.qcow2").write_bytes(b"QFI\xfb" + b"\x00" * 1020)
    (d / "b.raw").write_bytes(b"QFI\xfb" + b"\x00" * 1020)
    cache = ImageCache(str(tmp_path / "cache"))
    assert cache.get(url("a.qcow2"))["format"] == "qcow2"
    assert cache.get(url("b.raw"))["format"] == "qcow2"


@pytest.mark.parametrize("name, body, reason", [
    ("missing.raw", None, "HTTP 404"),
    ("empty.raw", b"", "empty file"),
    ("odd.raw", b"x" * 1000, "not a whole number of 512-byte sectors"),
    ("bad.qcow2", b"<html>not found</html>" + b" " * 490, "not a qcow2 file"),
    ("bad.raw.gz", b"not gzip at all", "decompression failed"),
    ("bad.raw.zst", b"not zstd at all", "not valid zstd data"),
])
def test_bad_images_raise_with_a_reason_and_cache_nothing(served, tmp_path, name, body, reason):
    d, _hits, url = served
    if body is not None:
        (d / name).write_bytes(body)
    cache = ImageCache(str(tmp_path / "cache"))
    with pytest.raises(ImageError, match=reason):
        cache.get(url(name))
    assert cache.cached(url(name)) is None
    assert [f for f in os.listdir(tmp_path / "cache")] == []


def test_file_url_and_unsupported_scheme(tmp_path):
    (tmp_path / "local.raw").write_bytes(RAW)
    cache = ImageCache(str(tmp_path / "cache"))
    assert cache.get((tmp_path / "local.raw").as_uri())["size"] == len(RAW)
    with pytest.raises(ImageError, match="unsupported URL scheme 'ftp'"):
        cache.get("ftp://127.0.0.1/x.raw")


def test_a_server_that_stalls_times_out_instead_of_hanging(tmp_path):
    """A server that accepts and then says nothing: the read timeout (short here) ends the
    download with a reason (no timing asserted: a hang would meet pytest's timeout)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    cache = ImageCache(str(tmp_path / "cache"), read_timeout=0.5)
    with pytest.raises(ImageError, match="timed out"):
        cache.get(f"http://127.0.0.1:{listener.getsockname()[1]}/slow.raw")
    listener.close()
