"""Host: the paths a driver may touch, and running commands."""

import os
import sys

import pytest

from appliance.agent.host import Host, PathRefused


@pytest.fixture
def host(tmp_path):
    (tmp_path / "root/etc").mkdir(parents=True)
    return Host(root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))


def test_paths_inside_the_allowed_roots(host, tmp_path):
    assert host.path("/etc/app/x.conf") == str(tmp_path / "root/etc/app/x.conf")
    assert host.path("/var/lib/x") == str(tmp_path / "root/var/lib/x")
    for bad, why in [("etc/x", "not an absolute path"), ("/etc/../root/x", ".."),
                     ("/etc/a\x00b", "NUL"), ("/tmp/x", "outside the allowed roots"),
                     ("/var/libx", "outside the allowed roots"), (None, "not an absolute")]:
        with pytest.raises(PathRefused, match=why):
            host.path(bad)


def test_symlinks_may_not_leave_their_root(host, tmp_path):
    os.symlink("/", tmp_path / "root/etc/up")
    os.symlink("/etc/app", tmp_path / "root/etc/abs")     # absolute: the host's /etc/app
    (tmp_path / "root/etc/real").mkdir()
    os.symlink(tmp_path / "root/etc/real", tmp_path / "root/etc/inside")
    for path in ("/etc/up/x", "/etc/abs/x"):
        with pytest.raises(PathRefused, match="through a symlink"):
            host.path(path)
    assert host.path("/etc/inside/x") == str(tmp_path / "root/etc/inside/x")


def test_real_root_and_own_allowed_roots(tmp_path):
    host = Host(root="/", allowed_roots=["/srv/apps"], state_dir=str(tmp_path))
    assert host.path("/srv/apps/a") == "/srv/apps/a"
    with pytest.raises(PathRefused, match=r"\(/srv/apps\)"):
        host.path("/etc/passwd")
    with pytest.raises(ValueError):
        Host(allowed_roots=["etc"], state_dir=str(tmp_path))


def test_run(host):
    assert host.run([sys.executable, "-c", "print('hi'); import sys; sys.exit(3)"]) == \
        (3, "hi\n")
    assert host.run(["/nonexistent/cmd"])[0] == 127
    code, out = host.run([sys.executable, "-c", "import time; print('x', flush=True); "
                                                "time.sleep(5)"], timeout=0.5)
    assert code == 124 and "timed out" in out
    host.systemctl_command = [sys.executable, "-c", "import sys; print(sys.argv[1:])"]
    assert host.systemctl("start", "u.service") == (0, "['start', 'u.service']\n")
