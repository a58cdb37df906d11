"""The configs driver on a tmp root prefix: atomic writes, owner/group/mode from the
node's own passwd, allowed roots, symlinks, on_change, remove."""

import os
import stat

import pytest

from appliance.configs.node import Driver, tail

from .fakehost import FakeHost, write_passwd


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "node"
    write_passwd(str(root))
    return FakeHost(root)


def item(path="/etc/app/app.conf", content="a=1\n", **value):
    return {"uuid": "u1", "kind": "config", "value": {
        "path": path, "owner": "root", "group": "root", "mode": "0644", "content": content,
        "on_change": {"kind": "no_action"}, **value}}


def test_writes_with_owner_group_and_mode_from_the_nodes_passwd(host):
    result = Driver(host).apply(item(owner="app", group="staff", mode="0640"), None)
    assert result["status"] == "ACTIVE", result
    st = os.stat(host.path("/etc/app/app.conf"))
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 50, 0o640)
    assert open(host.path("/etc/app/app.conf")).read() == "a=1\n"
    assert result["value"]["changed_at"].endswith("Z")
    # nothing but the file is left in its directory (the temporary file was renamed)
    assert os.listdir(host.path("/etc/app")) == ["app.conf"]


def test_a_rewrite_replaces_the_inode(host):
    driver = Driver(host)
    driver.apply(item(), None)
    before = os.stat(host.path("/etc/app/app.conf")).st_ino
    held = open(host.path("/etc/app/app.conf"))
    driver.apply(item(content="a=2\n"), item())
    # a reader holding the old file still reads the whole old content
    assert held.read() == "a=1\n"
    assert os.stat(host.path("/etc/app/app.conf")).st_ino != before
    assert open(host.path("/etc/app/app.conf")).read() == "a=2\n"


def test_on_change_runs_once_per_changed_delivery(host, tmp_path):
    marks = tmp_path / "marks"
    hook = {"kind": "shell", "command": f"echo ran >> {marks}; echo out; echo err >&2"}
    driver = Driver(host)
    first = driver.apply(item(on_change=hook), None)
    assert first["value"]["exit_code"] == 0 and "out" in first["value"]["output"]
    assert "err" in first["value"]["output"]
    # the same file again (a resync): nothing ran
    again = driver.apply(item(on_change=hook), item(on_change=hook))
    assert again["status"] == "ACTIVE" and again["value"]["exit_code"] is None
    driver.apply(item(content="b\n", on_change=hook), item(on_change=hook))
    driver.apply(item(content="b\n", mode="0600", on_change=hook), item(on_change=hook))
    assert marks.read_text().count("ran") == 3


def test_a_failing_on_change_is_an_error_with_its_exit_code_and_output_tail(host):
    hook = {"kind": "shell", "command": "head -c 10000 /dev/zero | tr '\\0' x; exit 3"}
    result = Driver(host).apply(item(on_change=hook), None)
    assert result["status"] == "ERROR" and "exited with 3" in result["reason"]
    assert result["value"]["exit_code"] == 3
    assert len(result["value"]["output"].encode()) == 4096
    assert tail("é" * 3000).encode("utf-8") == ("é" * 2048).encode("utf-8")


@pytest.mark.parametrize("path", ["/tmp/x", "/etc", "/usr/bin/x", "/var/libx/y",
                                  "/etc/../tmp/x", "etc/x"])
def test_a_path_outside_the_allowed_roots_is_refused_saying_why(host, path):
    result = Driver(host).apply(item(path=path), None)
    assert result["status"] == "ERROR"
    assert "outside the allowed roots" in result["reason"] or "'..'" in result["reason"] \
        or "not absolute" in result["reason"]
    assert not os.path.exists(host.path("/tmp/x"))


def test_no_symlink_out_of_the_allowed_roots(host, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.makedirs(host.path("/etc"), exist_ok=True)
    os.symlink(str(outside), host.path("/etc/evil"))        # absolute: out of the node
    os.symlink("../tmp", host.path("/etc/up"))               # relative: to /tmp of the node
    driver = Driver(host)
    for path in ("/etc/evil/x", "/etc/up/x"):
        result = driver.apply(item(path=path), None)
        assert result["status"] == "ERROR" and "outside the allowed roots" in result["reason"]
    assert os.listdir(outside) == []
    # a symlink that stays inside is followed
    os.makedirs(host.path("/srv/data"))
    os.symlink("/srv/data", host.path("/etc/data"))
    assert driver.apply(item(path="/etc/data/f"), None)["status"] == "ACTIVE"
    assert open(host.path("/srv/data/f")).read() == "a=1\n"
    # a symlink at the file's own name is replaced, not followed
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(str(victim), host.path("/etc/link.conf"))
    assert driver.apply(item(path="/etc/link.conf"), None)["status"] == "ACTIVE"
    assert victim.read_text() == "keep"
    assert not os.path.islink(host.path("/etc/link.conf"))


def test_unknown_owner_or_group_is_an_error(host):
    assert "no such user" in Driver(host).apply(item(owner="nobody9"), None)["reason"]
    assert "no such group" in Driver(host).apply(item(group="nogroup9"), None)["reason"]


def test_remove_deletes_the_file_and_only_it(host):
    driver = Driver(host)
    driver.apply(item(), None)
    os.makedirs(host.path("/etc/app"), exist_ok=True)
    open(host.path("/etc/app/other"), "w").close()
    driver.remove(item())
    assert os.listdir(host.path("/etc/app")) == ["other"]
    driver.remove(item())           # already gone: nothing to do
    driver.remove(item(path="/tmp/x"))
