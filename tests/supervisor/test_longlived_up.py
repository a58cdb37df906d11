"""`appliance up` (what `make run` runs) serves event streams on the API's event loop
(docs/long-lived.md): more streams than the API has threads stay open on the one base URL,
an event reaches each of them, and an ordinary GET answers meanwhile."""

import json

import pytest

from tests.apiserver import Client
from tests.raw_http import opened, read_until
from tests.supervisor.test_supervisor import Up

STREAMS = 40        # above the API's 32 threads


@pytest.fixture
def up(tmp_path):
    running = Up(tmp_path)
    yield running
    running.close()


@pytest.mark.timeout(120)
def test_streams_beyond_the_threads_through_appliance_up(up):
    up.wait_line("appliance API is ready at ")
    with open(up.state_dir / "admin-password") as f:
        password = f.read().strip()
    client = Client("127.0.0.1", up.api_port)
    token = client.post("/v1/iam/clients/default/actions/get_token/invoke", {
        "grant_type": "password", "username": "admin", "password": password}).json[
        "access_token"]
    admin = client.with_token(token)
    streams = []
    try:
        for _ in range(STREAMS):
            streams.append(opened(up.api_port, "/v1/events", token, "text/event-stream",
                                  host="x"))
        for sock in streams:
            assert read_until(sock, lambda b: b"retry:" in b).startswith(b"HTTP/1.1 200")
        assert admin.get("/v1/iam/projects").status == 200
        made = admin.post("/v1/iam/projects", {"name": "up-streams"})
        assert made.status == 201, made
        for sock in streams:
            seen = read_until(sock, lambda b: made.json["uuid"].encode() in b)
            event = [line for line in seen.split(b"\n") if made.json["uuid"].encode() in line
                     and line.startswith(b"data: ")]
            assert event and json.loads(event[0][6:])["type"] == "created"
    finally:
        for sock in streams:
            sock.close()
