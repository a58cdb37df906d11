"""The loop's payload refresh (appliance/agent/poll.py, docs/long-lived.md): the parked
polls of one node share each recomputation; a payload computed after an older generation
never answers a poll that has seen a newer one, even when a change lands while that
computation runs; and a stopped hub stays stopped.

The gate is a producer of this module, registered like the test capability: it gives no
item (the payload is the test capability's alone), counts its calls, and can hold one
computation until the test lets it go. Nothing is mocked."""

import threading
import time

import pytest

from appliance.agent import capabilities
from tests.agent import testcap
from tests.agent.conftest import add_file, agent_token, enroll, hw_node
from tests.agent.test_longlived import opened, read_all_until
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

GATE_KIND = "testgate"      # sorts after testfile: the files are read before the gate holds


class Gate:
    def __init__(self):
        self.calls = {}             # node uuid -> producer calls
        self.hold_node = None       # the next call for this node waits for `release`
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()

    def produce(self, view, node):
        with self.lock:
            self.calls[node["uuid"]] = self.calls.get(node["uuid"], 0) + 1
            hold = self.hold_node == node["uuid"]
            if hold:
                self.hold_node = None
        if hold:
            self.held.set()
            self.release.wait(30)
        return []


GATE = Gate()


def for_node(view, node):
    return GATE.produce(view, node)


@pytest.fixture
def gated(tmp_path):
    global GATE
    GATE = Gate()
    testcap.install()
    capabilities.PRODUCERS[GATE_KIND] = f"{__name__}:for_node"
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, api_threads=4,
                    agent_max_polls=1000).start()
    try:
        yield srv
    finally:
        GATE.release.set()
        srv.stop()
        capabilities.PRODUCERS.pop(GATE_KIND, None)
        testcap.uninstall()


def agent_of(srv):
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    node = hw_node(admin)
    cred = enroll(srv, admin, node["uuid"])
    token = agent_token(srv, cred)
    return node, f"/v1/ua/agents/{cred['agent']}/payload", token


def hub_of(srv):
    return srv.api.resources["/v1/ua/agents"].hub


def until(condition, seconds=20):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def contents(raw):
    import json
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), raw[:300]
    payload = json.loads(body)
    return payload["hash"], {i["value"]["content"] for i in payload["resources"]}


def answered(raw):
    return b"\r\n\r\n" in raw and raw.rstrip().endswith(b"}")


def test_the_polls_of_one_node_share_each_recomputation(gated):
    node, payload, token = agent_of(gated)
    hub = hub_of(gated)
    current = gated.client(token).get(payload).json["hash"]
    polls = [opened(gated.port, f"{payload}?hash={current}&wait=30", token)
             for _ in range(20)]
    try:
        assert until(lambda: hub.waiting == 20)
        before = GATE.calls.get(node["uuid"], 0)
        add_file(gated.store, {"kind": "node", "node": node["uuid"]}, "/etc/shared", "s")
        got = read_all_until(polls, answered)
        for raw in got.values():
            digest, files = contents(raw)
            assert digest != current and files == {"s"}
        # one computation for the 20 polls (another store write meanwhile may add one)
        assert 1 <= GATE.calls[node["uuid"]] - before < 20
    finally:
        for s in polls:
            s.close()


def test_a_change_during_a_recomputation_is_never_hidden_by_it(gated):
    """Poll 1 waits; change 1 starts its node's recomputation, which reads the files and
    is then held. Change 2 lands, and poll 2 parks with the payload after change 2. The
    held computation (from before change 2) answers poll 1, never poll 2: poll 2 answers
    only at change 3, with every file."""
    node, payload, token = agent_of(gated)
    hub = hub_of(gated)
    target = {"kind": "node", "node": node["uuid"]}
    agent = gated.client(token)
    first = agent.get(payload).json["hash"]
    poll1 = opened(gated.port, f"{payload}?hash={first}&wait=30", token)
    poll2 = None
    try:
        assert until(lambda: hub.waiting == 1)
        GATE.hold_node = node["uuid"]
        add_file(gated.store, target, "/etc/one", "1")
        assert GATE.held.wait(20)                   # the recomputation has read "1"
        add_file(gated.store, target, "/etc/two", "2")
        after_two = agent.get(payload).json
        assert {i["value"]["content"] for i in after_two["resources"]} == {"1", "2"}
        poll2 = opened(gated.port, f"{payload}?hash={after_two['hash']}&wait=30", token)
        # both wait on the loop (not only counted by the request threads)
        assert until(lambda: hub.waiting == 2 and len(hub._waiters) == 2)
        GATE.release.set()
        # poll 1 gets what the held computation saw: newer than what it had
        digest, files = contents(read_all_until([poll1], answered)[poll1])
        assert digest != first and files == {"1"}
        # the refresh passes are over (the one after change 2 computed poll 2's node
        # again and found its hash unchanged): poll 2 is still waiting
        assert until(lambda: hub._refreshing is None and hub.waiting == 1)
        add_file(gated.store, target, "/etc/three", "3")
        digest, files = contents(read_all_until([poll2], answered)[poll2])
        assert digest != after_two["hash"] and files == {"1", "2", "3"}
    finally:
        poll1.close()
        if poll2 is not None:
            poll2.close()


def test_a_stopped_hub_answers_its_polls_and_stays_stopped(gated):
    node, payload, token = agent_of(gated)
    hub = hub_of(gated)
    current = gated.client(token).get(payload).json["hash"]
    polls = [opened(gated.port, f"{payload}?hash={current}&wait=30", token)
             for _ in range(3)]
    try:
        assert until(lambda: hub.waiting == 3)
        hub.stop()
        # each parked poll answers at once with what it has
        for raw in read_all_until(polls, answered).values():
            assert contents(raw)[0] == current
        assert until(lambda: hub.waiting == 0)
        # a poll reaching the stopped hub answers at once and starts no new watch
        late = gated.client(token).get(payload, query={"hash": current, "wait": 30})
        assert late.status == 200 and late.json["hash"] == current
        assert late.header("Retry-After") is None
        assert hub._watch is None and hub.waiting == 0
        # nor does a change wake anything: nothing waits
        add_file(gated.store, {"kind": "node", "node": node["uuid"]}, "/etc/late", "l")
        assert hub._watch is None and hub._refreshing is None
    finally:
        for s in polls:
            s.close()
