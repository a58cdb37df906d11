"""appliance/files.py: the one writer of whole files on a node."""

import os
import stat

import pytest

from appliance.files import write_atomically


def entries(directory):
    return sorted(os.listdir(directory))


def test_a_file_is_replaced_whole_with_exactly_its_mode_whatever_the_umask(tmp_path):
    path = tmp_path / "conf"
    path.write_text("old")
    old = os.umask(0o777)               # a mode from the umask would be 000
    try:
        write_atomically(str(path), "new\n", 0o644)
    finally:
        os.umask(old)
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    write_atomically(str(path), b"\x00bytes", 0o600, sync=False)
    assert path.read_bytes() == b"\x00bytes"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert entries(tmp_path) == ["conf"]             # no temp file left


def test_the_file_s_missing_folder_is_made_with_the_mode_asked(tmp_path):
    path = tmp_path / "keys" / "inner" / "key"
    write_atomically(str(path), "k", dir_mode=0o700)
    assert stat.S_IMODE((tmp_path / "keys" / "inner").stat().st_mode) == 0o700
    site = tmp_path / "sites" / "site"
    write_atomically(str(site), "s", 0o644, dir_mode=0o755)
    assert stat.S_IMODE((tmp_path / "sites").stat().st_mode) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_the_owner_is_given_before_the_file_appears(tmp_path):
    path = tmp_path / "pg.conf"
    write_atomically(str(path), "x", 0o600, owner=(65534, 65534))
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o600)


def test_a_symlink_at_the_path_is_replaced_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    link = tmp_path / "conf"
    link.symlink_to(target)
    write_atomically(str(link), "mine")
    assert not link.is_symlink() and link.read_text() == "mine"
    assert target.read_text() == "untouched"


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "conf"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_atomically(str(path), 12345)
    assert path.read_text() == "old"
    assert entries(tmp_path) == ["conf"]
