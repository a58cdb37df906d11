"""GET /v1/system/daemons: each daemon's state as the API reads it from
<state>/run/daemons (appliance/daemon_state.py), with real daemon processes, and the
states worked out from the records that the supervisor and systemd's ExecStopPost write."""

import os
import signal
import subprocess
import sys
import time

import pytest

from appliance import daemon_state
from appliance.capabilities import daemons as descriptors
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user
from tests.secret.conftest import DaemonProcess
from tests.waiting import eventually

NAMES = [d.name for d in descriptors()]
PATH = "/v1/system/daemons"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    yield srv, admin
    srv.stop()


def by_name(client):
    resp = client.get(PATH)
    assert resp.status == 200, resp
    return {d["name"]: d for d in resp.json}


def test_every_daemon_is_listed_and_none_has_started(world):
    _, admin = world
    listed = admin.get(PATH).json
    assert [d["name"] for d in listed] == NAMES
    for d in listed:
        assert d["state"] == ("waiting" if d["on_demand"] else "starting"), d
        assert d["since"] is None and d["pid"] is None and d["last_success_at"] is None
    assert by_name(admin)["sqldb"]["on_demand"] is True
    assert by_name(admin)["compute"]["on_demand"] is False


def test_a_running_daemon_then_killed_then_stopped(world):
    srv, admin = world
    daemon = DaemonProcess("delivery", srv.settings["state_dir"]).start()
    try:
        running = eventually(lambda: (lambda d: d if d["state"] == "running" else None)(
            by_name(admin)["delivery"]), 30, "delivery running")
        assert running["pid"] == daemon.proc.pid and running["since"].endswith("Z")
        # its first pass over its kinds succeeded: the metrics' last success shows
        done = eventually(lambda: (lambda d: d if d["last_success_at"] else None)(
            by_name(admin)["delivery"]), 30, "delivery's first pass")
        assert done["last_success_kind"]
        daemon.kill()
        # nobody (no supervisor here) recorded its end: gone is failed
        gone = by_name(admin)["delivery"]
        assert gone["state"] == "failed" and "is gone" in gone["reason"]
        assert gone["pid"] is None
        daemon.start()
        eventually(lambda: by_name(admin)["delivery"]["state"] == "running", 30,
                   "delivery running again")
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(30) == 0
        stopped = by_name(admin)["delivery"]
        assert stopped["state"] == "stopped" and stopped["since"]
    finally:
        daemon.stop()


def test_states_from_the_records(tmp_path):
    state = str(tmp_path)
    now = time.time()

    def state_of(name, on_demand=False):
        return daemon_state.state_of(name, daemon_state.read_record(state, name), on_demand,
                                     now, daemon_state.boot_id())[:2]

    assert state_of("x", on_demand=True) == ("waiting", None)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        daemon_state.record_started(state, "x", pid=sleeper.pid)
        assert state_of("x")[0] == "running"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert state_of("x")[0] == "failed"
    # under a supervisor (systemd, appliance up), the moment before it records the end
    daemon_state._write(state, "x", {**daemon_state.read_record(state, "x"),
                                     "supervised": True})
    assert state_of("x")[0] == "restarting"
    # the supervisor reaped it and restarts it in 2 s
    daemon_state.record_ended(state, "x", "killed by SIGKILL", restart_at=now + 2)
    assert state_of("x")[0] == "restarting"
    # ...but nothing started it within the grace: failed
    daemon_state.record_ended(state, "x", "exited with code 1",
                              restart_at=now - daemon_state.RESTART_GRACE_SECONDS - 1)
    assert state_of("x")[0] == "failed"
    # a record of another boot is not this boot's
    record = daemon_state.read_record(state, "x")
    daemon_state._write(state, "x", {**record, "boot_id": "another boot"})
    assert state_of("x", on_demand=True) == ("waiting", None)


def test_systemd_exec_stop_post_records_the_end(tmp_path, monkeypatch):
    """The unit's ExecStopPost command, with the variables systemd gives it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env.update(APPLIANCE_STATE_DIR=str(tmp_path), APPLIANCE_CONFIG=os.devnull,
               SERVICE_RESULT="signal", EXIT_CODE="killed", EXIT_STATUS="KILL")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-m", "appliance.daemon_state", "ended", "dns"],
                   env={**env, "PYTHONPATH": root}, cwd=root, check=True)
    record = daemon_state.read_record(str(tmp_path), "dns")
    assert record["reason"] == "signal: killed KILL" and record["clean"] is False
    state, since, reason = daemon_state.state_of("dns", record, False, time.time(),
                                                 daemon_state.boot_id())
    assert state == "restarting" and reason == "signal: killed KILL"
    env["SERVICE_RESULT"] = "success"
    subprocess.run([sys.executable, "-m", "appliance.daemon_state", "ended", "dns"],
                   env={**env, "PYTHONPATH": root}, cwd=root, check=True)
    assert daemon_state.read_record(str(tmp_path), "dns")["clean"] is True


def test_platform_only(world):
    srv, admin = world
    project = make_project(admin)
    uid, username, password = make_user(admin)
    bind(admin, uid, "owner", project)
    owner = srv.client(srv.login(username, password, f"project:{project}"))
    refused = owner.get(PATH)
    assert refused.status == 403 and refused.json["type"] == "Forbidden"
    # every permission, but inside a project: still not the platform
    uid, username, password = make_user(admin)
    bind(admin, uid, "admin", project)
    project_admin = srv.client(srv.login(username, password, f"project:{project}"))
    refused = project_admin.get(PATH)
    assert refused.status == 403 and "admin project" in refused.json["message"]
    assert srv.client().get(PATH).status == 401
    scoped_admin = srv.client(srv.login("admin", ADMIN_PASSWORD, f"project:{ADMIN_PROJECT}"))
    assert scoped_admin.get(PATH).status == 200


def test_openapi_documents_it(world):
    srv, _ = world
    op = srv.client().get("/v1/openapi.json").json["paths"][PATH]["get"]
    assert op["x-permission"] == "appliance.daemons.read"
    assert "403" in op["responses"] and "running" in str(op["responses"]["200"])
