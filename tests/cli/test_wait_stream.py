"""`--wait` on the event stream (appliance/cli/wait.py), against the real API.

No compute daemon runs here: the tests move a node's status in the store, as the daemon
would. A node stands for every waited-for resource: all --wait commands share the waiter.
"""

from __future__ import annotations

import threading
import time
import urllib.parse

import pytest

from appliance.cli.client import HttpResponse, Unreachable

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

from .conftest import ADMIN_PROJECT, Cli
from .test_compute import IMAGE, NODES

EVENTS = "/v1/events"
FELL_BACK = "note: cannot follow the event stream"


class Hooked:
    """The CLI's recording transport, with `hook(path, query, headers)` run before each
    request;
    a hook may answer in the server's place (return an HttpResponse) to stand for a proxy
    that breaks the stream, which this machine has no such proxy to run."""

    def __init__(self, inner, hook):
        self.inner, self.hook = inner, hook

    def __call__(self, method, url, headers, body, timeout, **trust):
        parts = urllib.parse.urlsplit(url)
        answer = self.hook(parts.path, dict(urllib.parse.parse_qsl(parts.query)), headers)
        if answer is not None:
            return answer
        return self.inner(method, url, headers, body, timeout, **trust)

    @property
    def sent(self):
        return self.inner.sent

    def to(self, path):
        return self.inner.to(path)


def play_daemon(node_name, store_kind, *moves, ready=lambda step: True):
    """A thread playing the daemon: once the node exists, it writes each (status, reason),
    the n-th (from 0) once `ready(n)` and a moment has passed."""
    def run():
        for step, (status, reason) in enumerate(moves):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                    store_kind.find(name=node_name) and ready(step)):
                time.sleep(0.02)
            time.sleep(0.6)
            store_kind.update(store_kind.find(name=node_name)[0]["uuid"],
                              {"status": status, "status_reason": reason})
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def when_listening(cli, node_name, store_kind, *moves):
    """The daemon's writes, each once the CLI asks the feed for what comes next (a request
    with `wait`) after the previous one, and a moment later: a waiter that polled would
    read the node many times in between."""
    return play_daemon(node_name, store_kind, *moves, ready=lambda step: sum(
        "wait" in dict(s.query) for s in cli.transport.to(EVENTS)) > step)


def node_reads(cli, uuid):
    return [s for s in cli.transport.to(NODES + uuid) if s.method == "GET"]


def add_waiting(cli, name, *extra):
    return cli("--json", "compute", "nodes", "add", "-p", ADMIN_PROJECT, "-i", IMAGE,
               "-n", name, "--wait", *extra)


def test_a_wait_ends_on_the_stream_and_reads_the_node_only_after_changes(logged_in, real_api):
    nodes = real_api.store.collection("compute_nodes")
    thread = when_listening(logged_in, "streamed", nodes, ("IN_PROGRESS", "copying the image"),
                            ("ACTIVE", None))
    result = add_waiting(logged_in, "streamed", "--wait-timeout", "60")
    thread.join(10)
    assert result.code == 0, result.stderr
    node = result.json()
    assert node["status"] == "ACTIVE"
    assert FELL_BACK not in result.stderr
    assert "IN_PROGRESS: copying the image (" in result.stderr
    assert f"{NODES}{node['uuid']}: ACTIVE (" in result.stderr
    asks = logged_in.transport.to(EVENTS)
    # the feed filtered to the one node; the first ask (no `since`) only learns where it is
    assert all(("uuid", node["uuid"]) in s.query for s in asks)
    assert "since" not in dict(asks[0].query) and "wait" not in dict(asks[0].query)
    # one read after the stream was opened, then one per change: not a clock's (a poll
    # every 0.2 s over the 1.2 s or more the two changes took would read it ~6 times)
    assert len(node_reads(logged_in, node["uuid"])) == 3


def test_a_change_before_the_stream_opens_is_seen(logged_in, real_api):
    """The node goes ACTIVE after the POST answered and before the feed is first asked:
    the feed's revision is past that change, so only the read made after opening the
    stream can see it, and it does."""
    nodes = real_api.store.collection("compute_nodes")
    moved = []

    def before_the_stream(path, query, headers):
        if path == EVENTS and not moved:
            uuid = nodes.find(name="raced")[0]["uuid"]
            nodes.update(uuid, {"status": "ACTIVE", "status_reason": None})
            moved.append(uuid)
        return None
    logged_in.transport = Hooked(logged_in.transport, before_the_stream)
    result = add_waiting(logged_in, "raced", "--wait-timeout", "20")
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE"
    assert FELL_BACK not in result.stderr
    order = [s.path for s in logged_in.transport.sent]
    uuid = result.json()["uuid"]
    # the stream was opened before the node was read; that one read saw the change, and
    # the feed was never asked for what came after it (the change was older)
    assert moved == [uuid] and order.index(EVENTS) < order.index(NODES + uuid)
    assert len(node_reads(logged_in, uuid)) == 1
    assert [dict(s.query).get("since") for s in logged_in.transport.to(EVENTS)] == [None]


def test_a_node_that_reaches_error_ends_the_wait_with_exit_1(logged_in, real_api):
    nodes = real_api.store.collection("compute_nodes")
    thread = when_listening(logged_in, "doomed-on-stream", nodes,
                            ("ERROR", "no hypervisor has 1 free core"))
    result = add_waiting(logged_in, "doomed-on-stream", "--wait-timeout", "60")
    thread.join(10)
    assert result.code == 1
    assert "is in ERROR: no hypervisor has 1 free core" in result.stderr
    assert FELL_BACK not in result.stderr
    assert any("wait" in dict(s.query) for s in logged_in.transport.to(EVENTS))


def test_a_stream_broken_by_a_proxy_is_asked_again_once_then_polled(logged_in, real_api):
    """Every ask for what comes next gets a proxy's page instead of the stream: the waiter
    asks again once after the same revision, then says so and polls to the end."""
    nodes = real_api.store.collection("compute_nodes")
    page = HttpResponse(200, {"content-type": "text/html"}, b"<html>gateway</html>")
    broken = []

    def proxy(path, query, headers):
        if path == EVENTS and "wait" in query:
            broken.append((query["since"], headers.get("Last-Event-ID")))
            return page
        return None
    logged_in.transport = Hooked(logged_in.transport, proxy)
    play_daemon("proxied", nodes, ("ACTIVE", None), ready=lambda step: len(broken) >= 2)
    result = add_waiting(logged_in, "proxied", "--wait-timeout", "60")
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE"
    # the reconnect: after the same revision, named as an EventSource names it
    assert [last for _, last in broken] == [None, broken[0][0]] and broken[0][0] == broken[1][0]
    notes = [line for line in result.stderr.splitlines() if line.startswith(FELL_BACK)]
    assert notes == [f"{FELL_BACK} (the answer is not an event stream); "
                     "polling every 0.2 s instead"]


def test_a_dropped_connection_is_asked_again_and_the_wait_stays_on_the_stream(
        logged_in, real_api):
    """The first ask for what comes next loses its connection (the transport raises what
    it raises on a reset): the waiter asks again after the same revision and goes on on
    the stream, without a note and without polling."""
    nodes = real_api.store.collection("compute_nodes")
    asked = []

    def drop_once(path, query, headers):
        if path == EVENTS and "wait" in query:
            asked.append((query["since"], headers.get("Last-Event-ID")))
            if len(asked) == 1:
                raise Unreachable("connection reset by peer")
        return None
    logged_in.transport = Hooked(logged_in.transport, drop_once)
    thread = when_listening(logged_in, "dropped", nodes, ("ACTIVE", None))
    result = add_waiting(logged_in, "dropped", "--wait-timeout", "60")
    thread.join(10)
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE"
    assert FELL_BACK not in result.stderr
    assert len(asked) >= 2 and asked[1] == (asked[0][0], asked[0][0]) and asked[0][1] is None
    assert len(node_reads(logged_in, result.json()["uuid"])) <= 2


@pytest.fixture(scope="module")
def capped_api(tmp_path_factory):
    """An API that serves no event stream at all (events_max_streams=0): each is a 503."""
    srv = ApiServer(str(tmp_path_factory.mktemp("capped")), ADMIN_PASSWORD,
                    events_max_streams=0).start()
    yield srv
    srv.stop()


def test_a_wait_falls_back_to_polling_when_the_stream_cap_is_reached(capped_api, tmp_path):
    cli = Cli(tmp_path / "config", f"http://127.0.0.1:{capped_api.port}")
    cli.login()
    nodes = capped_api.store.collection("compute_nodes")
    # ACTIVE only after the waiter's first read: it must read again to see it
    play_daemon("capped", nodes, ("ACTIVE", None), ready=lambda step: any(
        s.method == "GET" and s.path.startswith(NODES) and s.path != NODES for s in cli.sent))
    result = add_waiting(cli, "capped", "--wait-timeout", "60")
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE"
    notes = [line for line in result.stderr.splitlines() if line.startswith(FELL_BACK)]
    assert len(notes) == 1 and "(503 " in notes[0] and "events_max_streams" in notes[0]
    # the stream was asked for once, then the node was polled until it was ACTIVE
    assert len(cli.transport.to(EVENTS)) == 1
    assert len(node_reads(cli, result.json()["uuid"])) >= 2
    # timeouts are the same on the polling path
    stuck = cli("compute", "nodes", "show", "capped", "--wait", "--wait-timeout", "0.5")
    assert stuck.code == 0
    nodes.update(result.json()["uuid"], {"status": "NEW"})
    stuck = cli("compute", "nodes", "show", "capped", "--wait", "--wait-timeout", "0.5")
    assert stuck.code == 1 and "still NEW after 0.5 s" in stuck.stderr
