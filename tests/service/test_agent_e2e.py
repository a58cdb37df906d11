"""Services end to end on this host: the real API, the agent's real runner, Host and
client (with node credentials), the services driver, and FakeSystemd in place of systemd
(tests/service/fakes.py: no systemd runs as PID 1 here). Each HW "node" has its own root
prefix. The status step runs in-process, as the status daemon runs it."""

import time

import pytest

from appliance.agent.client import AgentClient
from appliance.agent.host import Host
from appliance.agent.runner import Runner
from appliance.agent.status import aggregate
from tests import waiting
from tests.agent.conftest import agent_token, enroll
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

from .conftest import SVC, created, hw_node, refused, service_body
from .fakes import FakeSystemd

LEASE = 1.5
# how long a change may take to reach a node: the agent answers within milliseconds; this
# is generous for a machine busy with VM boots and image builds
PROMPT = 10.0
AGENT_UNIT = "appliance-agent.service"


def eventually(check, seconds=PROMPT, what=""):
    return waiting.eventually(check, seconds, what)


@pytest.fixture
def api(tmp_path):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, api_threads=12,
                    service_lease_seconds=LEASE).start()
    yield srv
    srv.stop()


class Node:
    """One HW node: its record, credential, Host (FakeSystemd as systemctl) and runner."""

    def __init__(self, api, admin, base):
        self.record = hw_node(admin)
        self.uuid = self.record["uuid"]
        self.cred = enroll(api, admin, self.uuid)
        self.base, self.api = base, api
        self.start()

    def start(self):
        client = AgentClient(f"http://127.0.0.1:{self.api.port}", self.cred["agent"],
                             self.cred["secret"])
        self.host = Host(root=self.base / "root", state_dir=str(self.base / "state"),
                         api=client, node=self.uuid, agent=self.cred["agent"])
        (self.base / "root").mkdir(parents=True, exist_ok=True)
        # the same fake systemd across agent restarts, as the node's systemd outlives them
        self.systemd = getattr(self, "systemd", None) or FakeSystemd(str(self.base / "root"))
        self.host.systemctl = self.systemd
        self.host.agent_unit = AGENT_UNIT
        self.runner = Runner(self.host, client, wait=5)
        self.runner.start()

    def kill(self):
        """The agent dies: its threads stop, and systemd stops the units bound to it."""
        self.runner.stop()
        self.systemd.unit_died(AGENT_UNIT)

    def running(self, unit):
        return self.systemd.running(unit)


@pytest.fixture
def nodes(api, tmp_path):
    admin = api.client(api.login("admin", ADMIN_PASSWORD))
    made = [Node(api, admin, tmp_path / name) for name in ("a", "b")]
    yield admin, made
    for node in made:
        node.runner.stop()


def status(api, svc):
    aggregate(api.store, "em_services")
    return api.store.collection("em_services").get(svc)


def unit_of(api, svc, node):
    """The unit of service `svc` on `node` (named by the node's target item)."""
    from appliance.agent.protocol import target_uuid
    from appliance.service.unit import unit_name
    return unit_name(api.store.collection("em_services").get(svc),
                     target_uuid(node, "service", svc))


def test_a_service_runs_on_every_target_and_follows_the_actions(api, nodes):
    admin, (a, b) = nodes
    svc = created(admin.post(SVC, service_body(a.uuid, target={
        "kind": "nodes", "nodes": [a.uuid, b.uuid]})))["uuid"]
    unit, unit_b = unit_of(api, svc, a.uuid), unit_of(api, svc, b.uuid)
    assert unit != unit_b           # two agents on one systemd would not collide
    eventually(lambda: a.running(unit) and b.running(unit_b), what="started on both")
    done = eventually(lambda: (s := status(api, svc))["status"] == "ACTIVE" and s,
                      what="ACTIVE")
    assert set(done["node_status"]) == {a.uuid, b.uuid}
    assert done["node_status"][a.uuid]["active_state"] == "active"
    with open(a.host.path(f"/etc/systemd/system/{unit}")) as f:
        assert "ExecStart=/bin/sh -c \"sleep infinity\"" in f.read()
    first = a.systemd.units[unit]["InvocationID"]
    assert admin.post(f"{SVC}/{svc}/actions/restart/invoke").status == 200
    eventually(lambda: a.systemd.units[unit]["InvocationID"] != first, what="restarted")
    assert admin.post(f"{SVC}/{svc}/actions/stop/invoke").status == 200
    eventually(lambda: not a.running(unit) and not b.running(unit_b), what="stopped")
    assert a.systemd.units[unit]["enabled"]          # "stopped" keeps the boot setting
    assert admin.delete(f"{SVC}/{svc}").status == 204
    eventually(lambda: unit not in a.systemd.loaded and unit_b not in b.systemd.loaded,
               what="units removed")


def test_a_oneshot_exit_code_reaches_the_status(api, nodes):
    admin, (a, _) = nodes
    svc = created(admin.post(SVC, service_body(a.uuid, path="exit 7", service_type={
        "kind": "oneshot"})))["uuid"]
    failed = eventually(lambda: (s := status(api, svc))["status"] == "ERROR" and s,
                        what="ERROR")
    assert failed["node_status"][a.uuid]["exit_code"] == 7
    assert "exit code 7" in failed["status_reason"]
    admin.put(f"{SVC}/{svc}", {"path": "true"})
    fixed = eventually(lambda: (s := status(api, svc))["status"] == "ACTIVE" and s,
                       what="ACTIVE")
    assert fixed["node_status"][a.uuid]["exit_code"] == 0


def test_ordering_between_services_on_the_node(api, nodes):
    admin, (a, _) = nodes
    db = created(admin.post(SVC, service_body(a.uuid, name="db")))["uuid"]
    web = created(admin.post(SVC, service_body(a.uuid, name="web", before=[
        {"kind": "service", "service": db}])))["uuid"]
    text = eventually(lambda: a.systemd.loaded.get(unit_of(api, web, a.uuid)),
                      what="web's unit")
    assert f"After=network.target {unit_of(api, db, a.uuid)}" in text


def test_a_monopoly_moves_when_its_agent_is_killed(api, nodes):
    admin, (a, b) = nodes
    svc = created(admin.post(SVC, service_body(a.uuid, target={
        "kind": "nodes", "nodes": [a.uuid, b.uuid]}, service_type={
        "kind": "monopoly"})))["uuid"]

    def runs(node):
        return node.running(unit_of(api, svc, node.uuid))
    eventually(lambda: runs(a) != runs(b), what="one holder")
    holder, other = (a, b) if runs(a) else (b, a)
    for _ in range(int(LEASE * 2 / 0.1)):          # renewals keep it where it is
        assert runs(holder) and not runs(other)
        time.sleep(0.1)
    killed = time.monotonic()
    holder.kill()
    assert not runs(holder)
    eventually(lambda: runs(other), seconds=LEASE + PROMPT, what="taken over")
    assert time.monotonic() - killed >= LEASE / 3
    done = eventually(lambda: (s := status(api, svc))["node_status"].get(other.uuid, {}).get(
        "holder") and s, what="the new holder reported")
    assert done["node_status"][other.uuid]["status"] == "ACTIVE"
    # the killed agent comes back: the lease is the other's, its unit stays down
    holder.start()
    time.sleep(LEASE)
    assert runs(other) and not runs(holder)


def test_an_agent_token_leases_only_for_its_own_targeted_node(api, nodes):
    admin, (a, b) = nodes
    c = hw_node(admin)["uuid"]
    both = created(admin.post(SVC, service_body(a.uuid, target={
        "kind": "nodes", "nodes": [a.uuid, b.uuid]},
        service_type={"kind": "monopoly"})))["uuid"]
    only_c = created(admin.post(SVC, service_body(c, service_type={
        "kind": "monopoly"})))["uuid"]
    agent = api.client(agent_token(api, a.cred))
    lease = "/actions/lease/invoke"
    assert agent.post(f"{SVC}/{both}{lease}", {"node": a.uuid}).status == 200
    assert "acts for node" in refused(agent.post(f"{SVC}/{both}{lease}", {"node": b.uuid}),
                                      403)
    assert "does not target" in refused(agent.post(f"{SVC}/{only_c}{lease}",
                                                   {"node": a.uuid}), 403)
    # nothing else of services
    assert refused(agent.get(SVC), 403)
    assert refused(agent.post(SVC, service_body(a.uuid)), 403)
    assert refused(agent.post(f"{SVC}/{both}/actions/restart/invoke"), 403)
    assert refused(agent.put(f"{SVC}/{both}", {"path": "x"}), 403)
