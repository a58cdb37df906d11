"""Modes of the data plane's directories: 0700 at every level, not only at the leaf."""

import os
import stat

from appliance.dataplane import DataPlane


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_every_level_is_created_0700_under_a_permissive_umask(tmp_path):
    old = os.umask(0o022)
    try:
        plane = DataPlane(str(tmp_path))
        plane.write(("secret", "secrets", "abc"), "value")
    finally:
        os.umask(old)
    root = tmp_path / "data-plane"
    for directory in (root, root / "secret", root / "secret" / "secrets"):
        assert mode(directory) == 0o700, directory
    assert mode(root / "secret" / "secrets" / "abc") == 0o600
    assert plane.read("secret", "secrets", "abc") == "value"


def test_directories_left_open_by_an_older_version_are_closed_at_start(tmp_path):
    leaf = tmp_path / "data-plane" / "secret" / "passwords"
    leaf.mkdir(parents=True)
    for directory in (leaf, leaf.parent, leaf.parent.parent):
        os.chmod(directory, 0o755)
    (leaf / "kept").write_text("v")
    os.chmod(leaf / "kept", 0o600)
    os.chmod(tmp_path, 0o755)

    plane = DataPlane(str(tmp_path))

    for directory in (leaf, leaf.parent, leaf.parent.parent):
        assert mode(directory) == 0o700, directory
    assert mode(tmp_path) == 0o755          # the state dir itself is not the data plane's
    assert plane.read("secret", "passwords", "kept") == "v"


def test_a_missing_data_plane_is_left_for_the_first_write(tmp_path):
    DataPlane(str(tmp_path))
    assert not (tmp_path / "data-plane").exists()
