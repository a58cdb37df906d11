"""A monopoly service on two nodes: two drivers (each with its own FakeSystemd) against a
real API whose leases last 1.5 s. Time is real: the lease expires on the server's clock."""

import shlex
import subprocess
import time
import types

import pytest

from appliance.agent.targets import View
from appliance.service import targets
from appliance.service.node import Driver
from appliance.service.resources import Services
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

from .conftest import SVC, created, hw_node, refused, service_body
from .fakes import ApiClient, FakeHost

LEASE = 1.5


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    service_lease_seconds=LEASE).start()
    yield srv
    srv.stop()


class Node:
    def __init__(self, server, admin, tmp_path, name):
        self.uuid = hw_node(admin)["uuid"]
        self.server = server
        self.host = FakeHost(tmp_path / name, self.uuid, ApiClient(admin),
                             agent_unit="appliance-agent.service")
        self.driver = Driver(self.host)
        self.applied = None

    def item(self, svc):
        node = self.server.store.collection("compute_nodes").get(self.uuid)
        return next(i for i in targets.for_node(View(self.server.store), node)
                    if i["master"] == svc)

    def apply(self, svc):
        item = self.item(svc)
        actual = self.driver.apply(item, self.applied)
        self.applied = item
        return actual

    def tick(self):
        return self.driver.tick([self.applied])

    def running(self):
        return self.host.systemd.running(self.applied["value"]["unit"])


def run_for(seconds, nodes, check):
    """Tick the living nodes every 0.1 s for `seconds`, checking after every step."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for node in nodes:
            node.tick()
        check()
        time.sleep(0.1)


def test_one_node_runs_it_and_the_other_takes_over(short, tmp_path):
    admin = short.client(short.login("admin", ADMIN_PASSWORD))
    a, b = Node(short, admin, tmp_path, "a"), Node(short, admin, tmp_path, "b")
    svc = created(admin.post(SVC, service_body(a.uuid, target={
        "kind": "nodes", "nodes": [a.uuid, b.uuid]},
        service_type={"kind": "monopoly"})))["uuid"]
    first = a.apply(svc)
    assert first["status"] == "ACTIVE" and first["value"]["holder"] is True
    standby = b.apply(svc)
    assert standby["status"] == "ACTIVE" and standby["value"]["holder"] is False
    assert "standby" in standby["reason"]
    assert a.running() and not b.running()
    assert not a.host.systemd.units[a.applied["value"]["unit"]]["enabled"]
    fence = a.host.path(f"/etc/systemd/system/{a.applied['value']['unit']}.d/"
                        "appliance-fence.conf")
    with open(fence) as f:
        assert "BindsTo=appliance-agent.service\n" in f.read()

    def one_at_most():
        assert not (a.running() and b.running())
    # a renews every LEASE/3: over two leases b never gets it
    run_for(2 * LEASE, [a, b], one_at_most)
    assert a.running() and not b.running()
    # a's agent is killed: no more ticks, and systemd stops the unit bound to it
    a.host.systemd.unit_died("appliance-agent.service")
    assert not a.running()
    # b takes over once the lease expired, not before
    died = time.monotonic()
    while not b.running():
        b.tick()
        one_at_most()
        assert time.monotonic() - died < LEASE + 3, "b never took over"
        time.sleep(0.05)
    assert time.monotonic() - died >= LEASE / 3     # not before a's lease could run out
    # a's agent comes back: the lease is b's, so a's unit stays down
    a.driver = Driver(a.host)
    (report,) = a.tick()
    assert not a.running() and report["value"]["holder"] is False
    assert "standby" in report["reason"]
    run_for(LEASE, [a, b], one_at_most)
    assert b.running()
    # b's agent restarts while its lease holds: it keeps (or restarts) its unit
    b.driver = Driver(b.host)
    b.host.systemd.unit_died("appliance-agent.service")
    b.tick()
    assert b.running() and not a.running()


def test_an_agent_that_cannot_renew_stops_its_unit_in_time(short, tmp_path):
    admin = short.client(short.login("admin", ADMIN_PASSWORD))
    a = Node(short, admin, tmp_path, "a")
    svc = created(admin.post(SVC, service_body(a.uuid, service_type={
        "kind": "monopoly"})))["uuid"]
    a.apply(svc)
    assert a.running()
    granted = short.store.collection("em_service_leases").get(svc)["expires_at"]

    class Down:
        def post(self, path, body):
            raise ConnectionRefusedError("API down")
    a.driver.leases.api = Down()
    while a.running():
        a.tick()
        time.sleep(0.05)
    # it stopped before the server's lease expired: no other node could have started yet
    from state.collection import format_time, utcnow
    assert format_time(utcnow()) < granted


def test_stopping_a_monopoly_service_stops_it_everywhere(short, tmp_path):
    admin = short.client(short.login("admin", ADMIN_PASSWORD))
    a = Node(short, admin, tmp_path, "a")
    svc = created(admin.post(SVC, service_body(a.uuid, service_type={
        "kind": "monopoly_oneshot"}, path="exit 0")))["uuid"]
    assert a.apply(svc)["value"]["holder"] is True
    (done,) = a.tick()
    assert done["status"] == "ACTIVE" and done["value"]["exit_code"] == 0
    assert admin.post(f"{SVC}/{svc}/actions/stop/invoke").status == 200
    stopped = a.apply(svc)
    assert stopped["status"] == "ACTIVE" and stopped["value"]["holder"] is False


def test_an_agent_may_lease_only_for_its_own_targeted_node(short):
    """The agent's principal (appliance/agent/enroll.py's AgentPrincipal carries `node`)
    against the handler: its own node only, and only a node the service targets."""
    admin = short.client(short.login("admin", ADMIN_PASSWORD))
    a, b, c = (hw_node(admin)["uuid"] for _ in range(3))
    svc = created(admin.post(SVC, service_body(a, target={"kind": "nodes", "nodes": [a, b]},
                                               service_type={"kind": "monopoly"})))
    resource = short.api.resources[SVC]
    record = short.store.collection("em_services").get(svc["uuid"])

    def ask(principal_node, node):
        principal = types.SimpleNamespace(node=principal_node, project_id=None,
                                          allows=lambda p: p == "em.service.lease")
        call = types.SimpleNamespace(api=short.api, store=short.store, principal=principal,
                                     body={"node": node})
        return resource.lease(call, record)

    assert ask(a, a)["granted"]
    from appliance.api.errors import Forbidden
    for own, asked in [(a, b), (c, c), (c, a)]:
        with pytest.raises(Forbidden):
            ask(own, asked)
    assert isinstance(resource, Services)
    assert refused(admin.post(f"{SVC}/{svc['uuid']}/actions/lease/invoke",
                              {"node": c}), 400)


def start_allowed(node):
    """Run the fence drop-in's ExecStartPre as systemd would (its `$$` and `%%` escapes
    undone), reading the deadline file under the node's root prefix: True when systemd
    would go on to start the unit."""
    unit = node.applied["value"]["unit"]
    with open(node.host.path(f"/etc/systemd/system/{unit}.d/appliance-fence.conf")) as f:
        line = next(x for x in f.read().splitlines() if x.startswith("ExecStartPre="))
    command = line[len("ExecStartPre="):].replace("$$", "$").replace("%%", "%")
    argv = shlex.split(command)
    assert argv[:2] == ["+/bin/sh", "-c"]       # + : as root, whatever the unit's User=
    argv[0] = "/bin/sh"
    return subprocess.run(argv).returncode == 0


def test_a_start_that_systemd_runs_after_the_lease_is_refused(short, tmp_path):
    """systemd may run a queued start long after the agent asked for it (a slow
    daemon-reload in a TCG guest: 13 s); the unit's own ExecStartPre checks this node's
    lease deadline, so a late start cannot overlap with the next holder."""
    admin = short.client(short.login("admin", ADMIN_PASSWORD))
    a, b = Node(short, admin, tmp_path, "a"), Node(short, admin, tmp_path, "b")
    svc = created(admin.post(SVC, service_body(a.uuid, target={
        "kind": "nodes", "nodes": [a.uuid, b.uuid]},
        service_type={"kind": "monopoly"})))["uuid"]
    assert a.apply(svc)["value"]["holder"] is True
    b.apply(svc)
    assert start_allowed(a) and not start_allowed(b)
    # a stops renewing (no ticks): once its deadline passed, a start of its unit that
    # systemd runs only now is refused; b, holding the lease next, may start
    with open(a.driver.deadline_path(a.applied["value"]["unit"])) as f:
        deadline = int(f.read())
    time.sleep(max(0.0, deadline - time.time()) + 1.1)
    assert not start_allowed(a)
    while not b.running():
        b.tick()
        time.sleep(0.05)
    assert start_allowed(b)
