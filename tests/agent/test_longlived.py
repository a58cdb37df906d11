"""Many long-lived connections on the API's event loop (docs/long-lived.md): 200 payload
long polls and 100 event streams wait at once on an API of 4 Waitress threads, while
ordinary GETs are answered; a change then reaches every poll, an event every stream."""

import json
import threading
import time

import pytest

from tests.agent import testcap
from tests.agent.conftest import add_file, agent_token, enroll, hw_node, refused
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.raw_http import opened, read_all
from tests.waiting import eventually

POLLS, STREAMS = 200, 100


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """4 threads, and the loop's caps well above what the test opens."""
    testcap.install()
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD, api_threads=4,
                    agent_max_polls=1000, events_max_streams=1000).start()
    yield srv
    srv.stop()
    testcap.uninstall()


def an_agent(srv):
    """(admin's client, an HW node, its agent's token, the agent's payload path, the
    payload's current hash): what a long poll of `srv` needs."""
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    node = hw_node(admin)
    cred = enroll(srv, admin, node["uuid"])
    token = agent_token(srv, cred)
    payload = f"/v1/ua/agents/{cred['agent']}/payload"
    current = srv.client(token).get(payload).json["hash"]
    return admin, node, token, payload, current


def read_all_until(socks, done, timeout=60):
    """Read every socket until done(bytes so far) holds for each; returns their bytes."""
    return read_all(socks, done, timeout)[0]


def test_hundreds_of_waits_cost_no_thread(wide):
    admin, node, token, payload, current = an_agent(wide)
    hub = wide.api.resources["/v1/ua/agents"].hub
    polls = [opened(wide.port, f"{payload}?hash={current}&wait=30", token)
             for _ in range(POLLS)]
    streams = [opened(wide.port, "/v1/events", admin.token, "text/event-stream")
               for _ in range(STREAMS)]
    socks = polls + streams
    try:
        eventually(lambda: hub.waiting >= POLLS and wide.api.events.open >= STREAMS, 30,
                   "every poll and stream waiting on the loop")
        assert hub.waiting == POLLS and wide.api.events.open == STREAMS
        # 300 connections wait, and the 4 threads still answer ordinary requests, many
        # at once, every one of them
        answers = []

        def ordinary():
            for _ in range(5):
                answers.append(admin.get("/v1/compute/nodes").status)
        workers = [threading.Thread(target=ordinary) for _ in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert answers == [200] * 40
        # an event to come, and the error body of the ordinary path meanwhile
        stranger = hw_node(admin)
        refused(wide.client(token).get(f"/v1/ua/agents/{'0' * 8}-0000-4000-8000-"
                                       f"{'0' * 12}/payload"), 404)
        # one change reaches every poll; one event reaches every stream
        add_file(wide.store, {"kind": "node", "node": node["uuid"]}, "/etc/wide", "w")
        got = read_all_until(polls, lambda b: b.endswith(b"}") and b"\r\n\r\n" in b)
        for raw in got.values():
            head, _, body = raw.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), raw[:200]
            assert b"X-Request-Id" in head or b"x-request-id" in head.lower()
            assert b'"hash"' in body and current.encode() not in body
        got = read_all_until(streams, lambda b: stranger["uuid"].encode() in b)
        for raw in got.values():
            assert raw.startswith(b"HTTP/1.1 200") and b"text/event-stream" in raw
            assert b"event: lifecycle" in raw and stranger["uuid"].encode() in raw
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while (hub.waiting or wide.api.events.open) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hub.waiting == 0


def test_a_poll_past_the_loops_cap_answers_at_once(tmp_path):
    testcap.install()
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, api_threads=4,
                    agent_max_polls=5).start()
    try:
        admin, node, token, payload, current = an_agent(srv)
        # more than the threads, up to the loop's cap
        held = [opened(srv.port, f"{payload}?hash={current}&wait=30", token)
                for _ in range(5)]
        hub = srv.api.resources["/v1/ua/agents"].hub
        eventually(lambda: hub.waiting >= 5, 20, "5 polls waiting")
        assert hub.waiting == 5
        over = srv.client(token).get(payload, query={"hash": current, "wait": 30})
        assert over.status == 200 and over.header("Retry-After") == "1"
        for s in held:
            s.close()
    finally:
        srv.stop()
        testcap.uninstall()


def test_without_the_hand_over_the_same_waits_hold_threads(tmp_path):
    """A WSGI server without longlived.install: the same coroutines answer, relayed by
    the request's thread, and the thread caps of before apply (3 of 4 threads)."""
    testcap.install()
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, api_threads=4, handover=False,
                    agent_max_polls=1000, events_max_streams=1000).start()
    try:
        admin, node, token, payload, current = an_agent(srv)
        hub = srv.api.resources["/v1/ua/agents"].hub
        assert hub.limit == 3
        held = [opened(srv.port, f"{payload}?hash={current}&wait=30", token)
                for _ in range(3)]
        eventually(lambda: hub.waiting >= 3, 20, "3 polls waiting")
        assert hub.waiting == 3
        # three of the four threads are held: the next poll is answered at once
        over = srv.client(token).get(payload, query={"hash": current, "wait": 30})
        assert over.status == 200 and over.header("Retry-After") == "1"
        # the fourth thread serves the rest
        assert admin.get("/v1/compute/nodes").status == 200
        add_file(srv.store, {"kind": "node", "node": node["uuid"]}, "/etc/relay", "r")
        got = read_all_until(held, lambda b: b.rstrip().endswith(b"}"))
        for raw in got.values():
            head, _, body = raw.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and current.encode() not in body
        for s in held:
            s.close()
        # a stream, relayed by its thread
        stream = opened(srv.port, "/v1/events", admin.token, "text/event-stream")
        eventually(lambda: srv.api.events.open >= 1, 20, "the stream open")
        assert srv.api.events.open == 1
        other = hw_node(admin)
        seen = read_all_until([stream], lambda b: other["uuid"].encode() in b)[stream]
        assert b"event: lifecycle" in seen and other["uuid"].encode() in seen
        stream.close()
    finally:
        srv.stop()
        testcap.uninstall()


def test_an_error_during_a_parked_wait_is_the_conventions_body(wide):
    """The node goes away while its agent's poll waits on the loop: the poll answers 409
    with the error body of the ordinary path, and its own request id."""
    admin, node, token, payload, current = an_agent(wide)
    hub = wide.api.resources["/v1/ua/agents"].hub
    waiting = hub.waiting
    sock = opened(wide.port, f"{payload}?hash={current}&wait=30", token)
    try:
        eventually(lambda: hub.waiting > waiting, 20, "the poll waiting")
        assert hub.waiting == waiting + 1
        assert admin.delete(f"/v1/compute/nodes/{node['uuid']}").status == 204
        raw = read_all_until([sock], lambda b: b.rstrip().endswith(b"}"))[sock]
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 409") and b"X-Request-Id: " in head
        error = json.loads(body)
        assert set(error) == {"type", "code", "message"} and error["code"] == 409
        assert "no longer exists" in error["message"]
    finally:
        sock.close()
