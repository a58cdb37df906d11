"""The compute daemon as a real process (`python -m daemons.compute`) against the API on a
real server: a hypervisor and a node POSTed through the API end ACTIVE, the node with an
address; power off and a DELETE are carried out. The daemon's libvirt is its own
`test:///default` (that driver's state lives inside the daemon process), so what the test
sees is the store the daemon writes, plus the daemon's log."""

import os

import pytest

from tests.compute.conftest import created, node_body
from tests.compute.reconcile_helpers import image_app
from tests.secret.conftest import DaemonProcess, wait_for
from tests.wsgiserver import LoopbackServer

H, N = "/v1/compute/hypervisors", "/v1/compute/nodes"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("served")
    with open(os.path.join(d, "base.raw"), "wb") as f:
        f.write(b"\x00" * 4096)
    srv = LoopbackServer(image_app(str(d), [])).start()
    yield f"http://127.0.0.1:{srv.port}"
    srv.stop()


@pytest.fixture(scope="module")
def compute(server):
    daemon = DaemonProcess("compute", server.settings["state_dir"]).start()
    yield daemon
    daemon.stop()


def test_api_to_active_and_back(admin, server, compute, images):
    hv = created(admin.post(H, {"name": "local", "driver_spec": {
        "kind": "libvirt", "connection_uri": "test:///default",
        "storage_pool": "default-pool"}}))
    # the daemon's first pass waits on its own start (imports, libvirt), seconds under load
    hv = wait_for(lambda: (lambda r: r if r["status"] == "ACTIVE" else None)(
        admin.get(f"{H}/{hv['uuid']}").json), timeout=60)
    assert hv["all_cores"] > 0 and hv["avail_disk"] == hv["all_disk"] == 100
    # the acceleration and why, as the API shows them (the test driver is not QEMU)
    assert (hv["accel"], hv["accel_reason"]) == (None, "not a QEMU hypervisor")
    node = created(admin.post(N, node_body(disk_spec={
        "kind": "root_disk", "image": f"{images}/base.raw", "size": 10})))
    node = wait_for(lambda: (lambda r: r if r["status"] in ("ACTIVE", "ERROR") else None)(
        admin.get(f"{N}/{node['uuid']}").json), timeout=30)
    assert node["status"] == "ACTIVE", node["status_reason"]
    assert node["hypervisor"] == hv["uuid"] and node["default_network"]["ipv4"]
    ports = server.store.collection("network_ports")
    assert ports.by("node", node["uuid"])
    # capacity is written at the end of the pass that made the node ACTIVE
    wait_for(lambda: admin.get(f"{H}/{hv['uuid']}").json["avail_disk"] == 90, timeout=30)

    bad = created(admin.post(N, node_body(disk_spec={
        "kind": "root_disk", "image": f"{images}/nowhere.raw", "size": 10})))
    bad = wait_for(lambda: (lambda r: r if r["status"] == "ERROR" else None)(
        admin.get(f"{N}/{bad['uuid']}").json), timeout=30)
    assert "HTTP 404" in bad["status_reason"]

    assert admin.delete(f"{N}/{node['uuid']}").status == 204
    wait_for(lambda: not ports.by("node", node["uuid"]), timeout=30)
    assert compute.proc.poll() is None
