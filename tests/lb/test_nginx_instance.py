"""The LB nginx instance's life: the agent's setting for its address, a restart after it
died, and the systemd unit (run by a stand-in systemctl, as this host has no systemd)."""

import json
import os
import re
import shlex
import signal
import subprocess

from appliance import config
from appliance.lb.node import UNIT, UNIT_PATH
from tests.lb.nginxnode import (backends, get, item, lb_value, new_uuid, node,  # noqa: F401
                                one_route, pool, route, vhost)
from tests.waiting import eventually


def test_the_agent_hands_its_listen_setting_to_the_driver(tmp_path, monkeypatch):
    from daemons.agent import build
    from appliance.lb.node import Driver
    cred = tmp_path / "agent.json"
    cred.write_text(json.dumps({"endpoint": "http://127.0.0.1:9", "agent": "a", "node": "n",
                                "secret": "s", "root": str(tmp_path / "root"),
                                "state_dir": str(tmp_path / "state")}))
    settings = config.load(os.devnull, environ={
        "APPLIANCE_AGENT_CREDENTIAL_FILE": str(cred),
        "APPLIANCE_AGENT_LB_LISTEN": "127.0.0.42"})
    runner = build(settings)
    assert Driver(runner.host).listen == "127.0.0.42"
    assert config.load(os.devnull, environ={})["agent_lb_listen"] == ""


def test_an_instance_that_died_is_started_again_by_tick(node, backends):
    a = backends("a")
    value, port, p = one_route(node, a)
    assert node.apply(value)["status"] == "ACTIVE"
    pid = node.driver.pid()
    os.killpg(pid, signal.SIGKILL)          # the master and its workers (its session)
    eventually(lambda: node.driver.pid() is None, 10, "nginx gone")
    # nothing applied: tick does nothing
    assert node.driver.tick([]) == []
    assert node.driver.pid() is None
    node.driver.tick([item(value)])
    assert node.driver.pid() not in (None, pid)
    assert get(node.address, port)[2] == b"a /"


class UnitRunner:
    """systemctl for the LB unit: runs its ExecStart/ExecReload/ExecStop as systemd would
    (node paths mapped into the test node's root), and records every call."""

    def __init__(self, root):
        self.root = root
        self.calls = []

    def unit(self):
        with open(self.root + UNIT_PATH) as f:
            return dict(line.split("=", 1) for line in f.read().splitlines()
                        if "=" in line)

    def run(self, key):
        unit = self.unit()
        command = re.sub(r"(?<![\w/])(/etc/appliance|/var/lib/appliance)",
                         lambda m: self.root + m.group(1), unit[key])
        if "$MAINPID" in command:
            try:
                with open(self.root + unit["PIDFile"]) as f:
                    command = command.replace("$MAINPID", f.read().strip())
            except FileNotFoundError:
                return 0, ""            # the unit is not running: nothing to signal
        done = subprocess.run(shlex.split(command), capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr

    def __call__(self, *args):
        self.calls.append(args)
        if args[:2] == ("enable", "--now"):
            return self.run("ExecStart")
        if args[0] == "reload":
            return self.run("ExecReload")
        if args[:2] == ("disable", "--now"):
            return self.run("ExecStop")
        return 0, ""


def test_on_a_systemd_node_the_unit_runs_nginx(node, backends):
    a = backends("a")
    runner = UnitRunner(node.host.root)
    node.host.systemctl = runner
    node.driver.systemd = True
    value, port, p = one_route(node, a)
    result = node.apply(value)
    assert result["status"] == "ACTIVE", result
    assert runner.calls == [("daemon-reload",), ("enable", "--now", UNIT)]
    assert get(node.address, port)[2] == b"a /"
    pid = node.driver.pid()

    value["vhosts"][0]["routes"][0]["condition"]["value"] = "/only/"
    assert node.apply(value)["status"] == "ACTIVE"
    assert runner.calls[-1] == ("reload", UNIT)
    assert node.driver.pid() == pid
    assert get(node.address, port)[0] == 404

    node.driver.remove(item(value))
    assert runner.calls[-1] == ("disable", "--now", UNIT)
    eventually(lambda: node.driver.pid() is None, 10, "nginx stopped by the unit")


def test_a_node_that_refuses_the_paths_reports_error(tmp_path):
    from appliance.agent.host import Host
    from appliance.lb.node import Driver
    host = Host(root=str(tmp_path), allowed_roots=["/srv"], state_dir=str(tmp_path / "s"))
    driver = Driver(host)             # constructing it must not fail the agent
    value = lb_value([vhost("http", 8080, [])], {})
    result = driver.apply(item(value), None)
    assert result["status"] == "ERROR" and "outside the allowed roots" in result["reason"]
    assert driver.tick([item(value)]) == []
    assert os.listdir(tmp_path) == []            # nothing written


def test_on_a_systemd_node_a_unit_that_cannot_start_says_why(node, backends):
    import socket
    a = backends("a")
    node.host.systemctl = UnitRunner(node.host.root)
    node.driver.systemd = True
    p = new_uuid()
    with socket.socket() as taken:
        taken.bind((node.address, 0))
        taken.listen()
        port = taken.getsockname()[1]
        value = lb_value([vhost("http", port, [route(pool_uuid=p)])], {p: pool(a.port)})
        result = node.apply(value)
    assert result["status"] == "ERROR"
    assert "did not start" in result["reason"] and "Address already in use" in result["reason"]
    assert node.driver.live_generation() is None
