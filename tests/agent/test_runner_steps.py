"""The runner's steps in-process (no threads) against a real API: driver exceptions,
tick(), unavailable items, a state file of another node."""

import json

from appliance.agent.client import AgentClient
from appliance.agent.host import Host
from appliance.agent.protocol import target_uuid
from appliance.agent.runner import Runner, read_state
from tests.agent import testcap
from tests.agent.conftest import add_file, enroll, hw_node


class Ticking(testcap.Driver):
    """testcap's driver whose tick() reports each item once as {"ticks": 1}."""

    def __init__(self, host):
        super().__init__(host)
        self.ticked = set()

    def tick(self, items):
        fresh = [i for i in items if i["uuid"] not in self.ticked]
        self.ticked.update(i["uuid"] for i in fresh)
        return [{"uuid": i["uuid"], "status": "ACTIVE", "reason": None,
                 "value": {"ticks": 1}} for i in fresh]


def runner_for(server, admin, tmp_path, node=None):
    node = node or hw_node(admin)
    cred = enroll(server, admin, node["uuid"])
    client = AgentClient(f"http://127.0.0.1:{server.port}", cred["agent"], cred["secret"])
    host = Host(root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"), api=client,
                node=node["uuid"], agent=cred["agent"])
    return node, Runner(host, client, drivers={testcap.KIND: Ticking}, wait=0.2)


def rows(admin, node):
    return {r["res_uuid"]: r for r in admin.get("/v1/ua/resources",
                                                query={"node": node["uuid"]}).json}


def test_exceptions_tick_and_unavailable(capserver, capadmin, tmp_path):
    node, runner = runner_for(capserver, capadmin, tmp_path)
    target = {"kind": "node", "node": node["uuid"]}
    good = add_file(capserver.store, target, "/etc/good", "g")
    boom = add_file(capserver.store, target, "/etc/boom.raise", "b")
    runner.step()
    found = rows(capadmin, node)
    assert found[good["uuid"]]["status"] == "ACTIVE"
    assert found[boom["uuid"]]["status"] == "ERROR"
    assert found[boom["uuid"]]["reason"] == "RuntimeError: the driver blew up"
    runner.tick()
    stored = capserver.store.collection("ua_resources").get(
        target_uuid(node["uuid"], testcap.KIND, good["uuid"]))
    assert stored["value"] == {"ticks": 1}      # (value is hidden in the API)
    # an unchanged payload applies nothing again; an unavailable item keeps its file
    applied = runner.drivers[testcap.KIND].applied
    runner.step()
    assert runner.drivers[testcap.KIND].applied == applied
    capserver.store.collection(testcap.MASTER_KIND).update(good["uuid"], {
        "unavailable": "not yet"})
    runner.step()
    assert (tmp_path / "root/etc/good").read_text() == "g"
    assert good["uuid"] in {e["item"]["master"] for e in runner.applied.values()}


def test_state_of_another_node_is_not_ours(capserver, capadmin, tmp_path):
    node, runner = runner_for(capserver, capadmin, tmp_path)
    add_file(capserver.store, {"kind": "node", "node": node["uuid"]}, "/etc/mine", "m")
    runner.step()
    assert read_state(str(tmp_path / "state"))["node"] == node["uuid"]
    _, other = runner_for(capserver, capadmin, tmp_path)   # same state dir, another node
    assert other.applied == {} and other.hash is None
    assert json.loads((tmp_path / "state/applied.json").read_text())["node"] == node["uuid"]
