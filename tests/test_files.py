"""appliance/files.py: the one writer of whole files on a node."""

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from appliance.files import PathRefused, read_file, remove_file, write_file


def entries(directory):
    return sorted(os.listdir(directory))


def test_a_file_is_replaced_whole_with_exactly_its_mode_whatever_the_umask(tmp_path):
    path = tmp_path / "conf"
    path.write_text("old")
    old = os.umask(0o777)               # a mode from the umask would be 000
    try:
        assert write_file(str(path), "new\n", 0o644) is True
    finally:
        os.umask(old)
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert write_file(str(path), b"\x00bytes", 0o600, sync=False) is True
    assert path.read_bytes() == b"\x00bytes"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert entries(tmp_path) == ["conf"]             # no temp file left


def test_unchanged_content_writes_nothing_and_says_false(tmp_path):
    path = tmp_path / "conf"
    assert write_file(str(path), "same\n", 0o640) is True
    inode = path.stat().st_ino
    assert write_file(str(path), "same\n", 0o640) is False
    assert path.stat().st_ino == inode               # not replaced
    # another mode is a change, as other bytes are
    assert write_file(str(path), "same\n", 0o600) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert write_file(str(path), "other\n", 0o600) is True
    assert path.read_text() == "other\n"


def test_the_file_s_missing_folders_are_made_private_where_asked(tmp_path):
    path = tmp_path / "keys" / "inner" / "key"
    write_file(str(path), "k", 0o600, private=(str(tmp_path / "keys"), None, 0o700))
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "keys" / "inner").stat().st_mode) == 0o700
    site = tmp_path / "sites" / "site"
    write_file(str(site), "s", 0o644)
    assert stat.S_IMODE((tmp_path / "sites").stat().st_mode) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_the_owner_and_mode_are_applied_and_compared(tmp_path):
    path = tmp_path / "pg.conf"
    assert write_file(str(path), "x", 0o600, owner=(65534, 65534)) is True
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o600)
    assert write_file(str(path), "x", 0o600, owner=(65534, 65534)) is False
    # the same bytes for another owner: a change
    assert write_file(str(path), "x", 0o600, owner=(0, 0)) is True
    assert (path.stat().st_uid, path.stat().st_gid) == (0, 0)


def test_a_symlink_at_the_path_is_replaced_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    link = tmp_path / "conf"
    link.symlink_to(target)
    assert write_file(str(link), "mine") is True
    assert not link.is_symlink() and link.read_text() == "mine"
    assert target.read_text() == "untouched"


def test_a_symlink_out_of_the_allowed_roots_is_refused_and_nothing_is_written(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "etc" / "app").symlink_to(outside)      # the attack: /etc/app -> outside
    with pytest.raises(PathRefused, match="outside the allowed roots"):
        write_file("/etc/app/x.conf", "evil", root=str(root), allowed_roots=["/etc"])
    assert entries(outside) == []
    with pytest.raises(PathRefused, match="outside the allowed roots"):
        read_file("/etc/app/x.conf", root=str(root), allowed_roots=["/etc"])
    # a symlink that stays inside the allowed roots is followed
    (root / "etc" / "real").mkdir()
    (root / "etc" / "inner").symlink_to("/etc/real")
    assert write_file("/etc/inner/y", "ok", root=str(root), allowed_roots=["/etc"])
    assert (root / "etc" / "real" / "y").read_text() == "ok"
    with pytest.raises(PathRefused, match="outside the allowed roots"):
        write_file("/srv/z", "no", root=str(root), allowed_roots=["/etc"])
    with pytest.raises(PathRefused, match=r"'\.\.'"):
        write_file("/etc/../srv/z", "no", root=str(root), allowed_roots=["/etc"])


def test_read_and_remove(tmp_path):
    path = str(tmp_path / "d" / "f")
    assert read_file(path) is None
    write_file(path, b"data")
    assert read_file(path) == b"data"
    (tmp_path / "d" / "link").symlink_to(path)
    with pytest.raises(PathRefused, match="symlink"):
        read_file(str(tmp_path / "d" / "link"))
    assert remove_file(path) is True
    assert not os.path.exists(path) and os.path.isdir(tmp_path / "d")
    assert remove_file(path) is False
    assert remove_file(str(tmp_path / "missing" / "f")) is False


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "conf"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_file(str(path), 12345)
    assert path.read_text() == "old"
    assert entries(tmp_path) == ["conf"]


def test_a_crash_between_the_temp_file_and_the_rename_leaves_the_old_file(tmp_path):
    """A real crash: a child process dies (os._exit, no clean-up of any kind) at the moment
    it would rename its temporary file over the target."""
    path = tmp_path / "conf"
    path.write_text("old\n")
    child = textwrap.dedent(f"""
        import os
        from appliance import files
        os.rename = lambda *a, **k: os._exit(9)
        files.write_file({str(path)!r}, "new\\n", 0o644)
    """)
    done = subprocess.run([sys.executable, "-c", child], cwd=os.getcwd())
    assert done.returncode == 9
    assert path.read_text() == "old\n"
    leftovers = [n for n in entries(tmp_path) if n != "conf"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".conf.")   # the dead temp file
    # the next write is whole again
    assert write_file(str(path), "new\n", 0o644) is True
    assert path.read_text() == "new\n"


def test_a_file_where_a_folder_must_be_is_an_os_error_and_a_refusal(tmp_path):
    (tmp_path / "blocker").write_text("not a directory")
    with pytest.raises(NotADirectoryError) as raised:
        write_file(str(tmp_path / "blocker" / "f"), "x")
    assert isinstance(raised.value, PathRefused) and "not a directory" in str(raised.value)
    assert (tmp_path / "blocker").read_text() == "not a directory"
