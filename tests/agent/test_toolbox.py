"""The node toolbox a driver is handed (appliance/agent/host.py, docs/node-toolbox.md):
write_file under the node's root prefix, ensure_unit and back-off."""

import os
import stat

import pytest

from appliance.agent.host import Host, PathRefused
from appliance.backoff import Backoff

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "{log}"
"""


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A node under a root prefix, with a stand-in `systemctl` first on PATH: systemd is
    not PID 1 here, so a real daemon-reload cannot run; the stand-in records its
    arguments, which is what ensure_unit's contract is about."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL.format(log=tmp_path / "systemctl.log"))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return Host(root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"))


def systemctl_calls(tmp_path):
    try:
        return (tmp_path / "systemctl.log").read_text().splitlines()
    except FileNotFoundError:
        return []


def test_write_file_lands_under_the_root_with_mode_and_says_when_it_changed(host, tmp_path):
    assert host.write_file("/etc/app/x.conf", "a=1\n", 0o640) is True
    real = tmp_path / "root/etc/app/x.conf"
    assert real.read_text() == "a=1\n" and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert host.write_file("/etc/app/x.conf", "a=1\n", 0o640) is False
    assert host.read_file("/etc/app/x.conf") == b"a=1\n"
    assert host.read_file("/etc/app/none") is None


def test_write_file_refuses_a_symlink_out_of_the_allowed_roots(host, tmp_path):
    (tmp_path / "root/etc").mkdir(parents=True)
    (tmp_path / "root/etc/app").symlink_to(tmp_path)          # the attack
    with pytest.raises(PathRefused):
        host.write_file("/etc/app/planted", "x")
    assert not (tmp_path / "planted").exists()
    with pytest.raises(PathRefused, match="outside the allowed roots"):
        host.write_file("/tmp/x", "x")


def test_ensure_unit_reloads_systemd_only_when_the_unit_changed(host, tmp_path):
    text = "[Service]\nExecStart=/bin/true\n"
    assert host.ensure_unit("demo.service", text) is True
    unit = tmp_path / "root/etc/systemd/system/demo.service"
    assert unit.read_text() == text and stat.S_IMODE(unit.stat().st_mode) == 0o644
    assert systemctl_calls(tmp_path) == ["daemon-reload"]
    assert host.ensure_unit("demo.service", text) is False
    assert systemctl_calls(tmp_path) == ["daemon-reload"]          # no second reload
    # a unit and its drop-in changed together: one reload
    assert host.ensure_unit("demo.service", text + "User=nobody\n",
                            dropins=[("fence.conf", "[Unit]\n")]) is True
    assert (tmp_path / "root/etc/systemd/system/demo.service.d/fence.conf").exists()
    assert systemctl_calls(tmp_path) == ["daemon-reload", "daemon-reload"]
    # only the drop-in changed: a reload too
    assert host.ensure_unit("demo.service", text + "User=nobody\n",
                            dropins=[("fence.conf", "[Unit]\nAfter=x\n")]) is True
    assert len(systemctl_calls(tmp_path)) == 3


def test_ensure_unit_reloads_through_the_driver_s_systemctl_when_given(host, tmp_path):
    seen = []
    assert host.ensure_unit("b.service", "[Service]\n", systemctl=seen.append) is True
    assert seen == ["daemon-reload"] and systemctl_calls(tmp_path) == []


def test_write_state_writes_the_agent_s_own_files_private(host, tmp_path):
    assert host.write_state("leases/u.service", "12\n") is True
    path = tmp_path / "state/leases/u.service"
    assert path.read_text() == "12\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state/leases").stat().st_mode) == 0o700


def test_backoff_doubles_per_key_up_to_the_cap_and_a_success_resets_it():
    now = [100.0]
    backoff = Backoff(1.0, 5.0, clock=lambda: now[0])
    assert backoff.ready("a")
    assert [backoff.failed("a") for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert not backoff.ready("a") and backoff.ready("b")     # one key holds back no other
    assert backoff.until("a") == 105.0
    now[0] = 105.0
    assert backoff.ready("a")
    backoff.succeeded("a")
    assert not backoff.failing("a") and backoff.failed("a") == 1.0
