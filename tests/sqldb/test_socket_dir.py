"""A node with a long root prefix (the development node of `make run` in a deep checkout,
docs/dev-node.md) puts PostgreSQL's unix socket in /tmp: the kernel takes at most 107
bytes of a socket's path. What is already in that place is used only when it is the OS
user's own 0700 directory."""

import os
import shutil

import pytest

from appliance.sqldb import pg

from .pgnode import require_postgres


def test_a_short_run_directory_keeps_its_socket():
    run = "/var/lib/appliance/sqldb/" + "0" * 36 + "/run"
    assert pg.socket_dir(run, 5432) == run


def test_a_long_run_directory_gets_one_in_tmp_per_run_directory():
    long_run = "/" + "d" * 40 + "/var/lib/appliance/sqldb/" + "0" * 36 + "/run"
    other = long_run.replace("/" + "d" * 40, "/" + "e" * 40)
    got = pg.socket_dir(long_run, 5432)
    assert got.startswith("/tmp/appliance-pg-") and got != pg.socket_dir(other, 5432)
    assert len(os.path.join(got, ".s.PGSQL.65535")) <= pg.SOCKET_PATH_MAX
    assert pg.socket_dir(long_run, 5432) == got         # the same one at every start


@pytest.fixture
def place(tmp_path):
    require_postgres()
    path = pg.socket_dir("/" + "x" * 80 + str(tmp_path), 5432)
    yield path
    if os.path.islink(path):
        os.unlink(path)
    shutil.rmtree(path, ignore_errors=True)


def test_the_socket_directory_is_made_the_os_users(place):
    user = pg.os_user()
    pg.prepare_socket_dir(place, user)
    st = os.lstat(place)
    assert (st.st_uid, st.st_mode & 0o777) == (user.pw_uid, 0o700)
    pg.prepare_socket_dir(place, user)          # found again: fine


def test_something_else_in_its_place_is_refused_and_left_alone(place, tmp_path):
    user = pg.os_user()
    os.symlink(str(tmp_path), place)            # a link planted by another user
    with pytest.raises(pg.Failed, match="is not a 0700 directory of postgres"):
        pg.prepare_socket_dir(place, user)
    assert os.readlink(place) == str(tmp_path)
    os.unlink(place)
    os.mkdir(place, 0o700)                      # root's, not postgres's
    with pytest.raises(pg.Failed, match="remove it"):
        pg.prepare_socket_dir(place, user)
    assert os.stat(place).st_uid == os.geteuid()


def test_an_agent_that_is_neither_root_nor_postgres_is_told_why(monkeypatch, tmp_path):
    """A `make run` as a normal user: its agent cannot become postgres. The effective
    uid is faked (this host runs tests as root); nothing else is."""
    require_postgres()
    from appliance.agent.host import Host
    host = Host(root=str(tmp_path), state_dir=str(tmp_path / "agent"))
    c = pg.Cluster(host, "0" * 8 + "-0000-0000-0000-" + "0" * 12, 15, 5432, "127.0.0.1")
    nobody = 65534
    monkeypatch.setattr(pg.os, "geteuid", lambda: nobody)
    with pytest.raises(pg.Failed, match="neither root nor postgres: run the agent as root"):
        pg.check_installed(c)
    monkeypatch.setattr(pg.os, "geteuid", lambda: 0)
    pg.check_installed(c)                       # root: fine
