"""The LB family of the metrics (appliance/lb/metrics.py): a real nginx LB instance on a
test node (tests/lb/nginxnode.py) with its stub_status on a unix socket, read by the
agent's lb driver, merged into the applied item's report by the real Runner, stored as
the report handler stores rows, and turned into gauges by the platform step.

The API's report endpoint is replaced by a recording client (the API is not what this
tests; its row shape is the one tests/sqldb/planworld.py writes)."""

import datetime
import shutil
import tempfile
import uuid as uuidlib
from pathlib import Path

import pytest

from appliance.agent.runner import Runner
from appliance.lb import metrics as lb_metrics
from appliance.lb import nginx
from appliance.lb.node import Driver
from state import Store
from tests.lb.nginxnode import Node, backends, get, item, one_route  # noqa: F401
from tests.metrics_reading import value
from tests.nginx import require_nginx


@pytest.fixture
def short_node():
    """A node whose root is short enough for a unix socket path (sun_path: 107 bytes)."""
    require_nginx("http_auth_request_module", "http_dav_module", "stream")
    base = Path(tempfile.mkdtemp(prefix="lbm", dir="/tmp"))
    n = Node(base / "n")
    yield n
    n.driver.stop_instance(grace=1)
    shutil.rmtree(base, ignore_errors=True)


class RecordingClient:
    def __init__(self):
        self.reports = []

    def report(self, resources, removed, full):
        self.reports.append((resources, removed, full))


def test_the_status_server_is_on_a_unix_socket_only():
    text = nginx.render_main([], [], prefix="/var/lib/appliance/lb",
                             status_socket="/var/lib/appliance/lb/status.sock")
    assert "listen unix:/var/lib/appliance/lb/status.sock;" in text
    assert "location = /stub_status { stub_status; }" in text
    assert "stub_status" not in nginx.render_main([], [], prefix="/var/lib/appliance/lb")
    with pytest.raises(nginx.RenderError):
        nginx.render_main([], [], prefix="/x", status_socket="/x/s.sock; daemon off")


def test_a_deep_root_has_no_status_socket(tmp_path):
    from appliance.agent.host import Host
    deep = tmp_path / ("d" * 120)
    driver = Driver(Host(root=str(deep), state_dir=str(tmp_path / "s"), settings={}))
    assert driver.status_socket is None and driver.nginx_status() is None


def test_nginx_numbers_reach_the_gauges_through_the_agent(short_node, backends, tmp_path):
    node = short_node
    a = backends("a")
    lb_val, port, _ = one_route(node, a)
    it = {**item(lb_val), "hash": "h1"}
    result = node.apply(lb_val)
    assert result["status"] == "ACTIVE", result
    for _ in range(3):
        assert get(node.address, port)[2] == b"a /"

    # the agent: its runner ticks the driver, which reads stub_status and merges it
    client = RecordingClient()
    runner = Runner(node.host, client, drivers={"lb": Driver}, wait=0)
    runner.drivers["lb"] = node.driver
    runner.needs_full = False
    runner.applied = {it["uuid"]: {"item": it, "actual": result}}
    runner.tick()
    [(resources, removed, full)] = client.reports
    [reported] = resources
    assert reported["status"] == "ACTIVE" and reported["value"]["applied_at"]
    reading = reported["value"]["readings"]["nginx"]
    assert reading["requests"] >= 3 and reading["accepted"] >= 3
    assert reading["active"] >= 1            # the stub_status request itself
    runner.tick()                            # within agent_lb_stats_seconds: no reading
    assert len(client.reports) == 1

    # the platform: the report handler's row, then the compute pass's LB step
    store = Store(str(tmp_path / "state"))
    node_rec = store.collection("compute_nodes").insert({
        "uuid": str(uuidlib.uuid4()), "name": "lb-node-1", "project_id": "p",
        "node_type": "HW"})
    lb = store.collection("network_lb").insert({
        "uuid": lb_val["lb"], "name": "front", "project_id": "proj-1", "type": {}})
    store.collection("ua_resources").insert({
        "uuid": it["uuid"], "kind": "lb", "hash": it["hash"], "status": "ACTIVE",
        "reason": None, "value": reported["value"], "node": node_rec["uuid"],
        "agent": node_rec["uuid"], "res_uuid": lb["uuid"], "master_kind": "network_lb"})
    lb_metrics.publish(store)
    labels = {"node": node_rec["uuid"], "node_name": "lb-node-1"}
    assert value("appliance_lb_nginx_requests_total", **labels) == reading["requests"]
    assert value("appliance_lb_nginx_connections_accepted_total", **labels) == \
        reading["accepted"]
    assert value("appliance_lb_nginx_connections_handled_total", **labels) == \
        reading["handled"]
    assert value("appliance_lb_nginx_connections", state="active", **labels) == \
        reading["active"]
    assert value("appliance_lb_info", lb=lb["uuid"], name="front", project="proj-1",
                 node=node_rec["uuid"]) == 1

    # a reading older than STALE_SECONDS is left out, the LB's placement stays
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
        seconds=lb_metrics.STALE_SECONDS + 60)
    lb_metrics.publish(store, now=later)
    assert value("appliance_lb_nginx_requests_total", **labels) is None
    assert value("appliance_lb_info", lb=lb["uuid"]) == 1
    store.close()


def test_readings_stay_out_of_the_lbs_node_status():
    from appliance.agent.status import judge
    node = {"uuid": "n1", "name": "n1"}
    it = {"uuid": "i1", "hash": "h"}
    row = {"hash": "h", "status": "ACTIVE", "reason": None,
           "value": {"nginx_check": None, "applied_at": "t", "readings": {"nginx": {}}}}
    status, _, node_status = judge([(node, it)], {"n1"}, {"i1": row})
    assert status == "ACTIVE"
    assert node_status == {"n1": {"nginx_check": None, "applied_at": "t",
                                  "status": "ACTIVE", "reason": None}}


def test_a_killed_instance_restarts_over_its_stale_status_socket(short_node, backends):
    """SIGKILL leaves the unix socket file behind; the restart by tick must still bind it
    (else the node's LBs would stay down), and the numbers come back."""
    import os
    import signal
    from tests.waiting import eventually
    node = short_node
    lb_val, port, _ = one_route(node, backends("a"))
    assert node.apply(lb_val)["status"] == "ACTIVE"
    pid = node.driver.pid()
    os.killpg(pid, signal.SIGKILL)
    eventually(lambda: node.driver.pid() is None, 10, "nginx gone")
    assert os.path.exists(node.driver.status_socket)        # left behind
    node.driver.tick([item(lb_val)])
    assert node.driver.pid() not in (None, pid)
    assert get(node.address, port)[2] == b"a /"
    assert node.driver.nginx_status()["requests"] >= 1
