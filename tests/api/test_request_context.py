"""Every answer names its request (X-Request-Id), the id the access log, the change feed
and the audit trail use (appliance/api/request_context.py). A client's own well-formed id
is kept, so its logs and ours join up; anything else is replaced, never echoed."""

import re

import pytest

from appliance.api import request_context

FRESH = re.compile(r"^[0-9a-f]{32}\Z")


def test_each_answer_has_a_fresh_request_id(admin):
    first = admin.get("/v1/health").header("X-Request-Id")
    second = admin.get("/v1/iam/projects").header("X-Request-Id")
    assert FRESH.match(first) and FRESH.match(second)
    assert first != second


def test_an_error_answer_has_one_too(admin):
    reply = admin.get("/v1/iam/projects/not-a-uuid")
    assert reply.status >= 400
    assert FRESH.match(reply.header("X-Request-Id"))


def test_a_clients_well_formed_id_is_kept(admin):
    reply = admin.get("/v1/health", headers={"X-Request-Id": "cli-42.retry:1"})
    assert reply.header("X-Request-Id") == "cli-42.retry:1"


@pytest.mark.parametrize("hostile", ["a" * 65, "x y", "id\tinjected", "<script>", "é"])
def test_a_hostile_id_is_replaced_not_echoed(admin, hostile):
    reply = admin.get("/v1/health", headers={"X-Request-Id": hostile})
    assert FRESH.match(reply.header("X-Request-Id"))


def test_the_actor_of_a_principal():
    class Agent:
        node = "6f1c0a52-0000-4000-8000-000000000001"

    class User:
        user = {"uuid": "u-1", "username": "alice"}     # a user record names it so
        project_id = "p-1"

    assert request_context.actor_of(Agent()) == {
        "type": "agent", "id": Agent.node, "name": None, "project_id": None}
    assert request_context.actor_of(User()) == {
        "type": "user", "id": "u-1", "name": "alice", "project_id": "p-1"}
    assert request_context.actor_of(None)["type"] == "platform"
    # outside a request, nobody is the actor: the writer is the platform
    assert request_context.actor() is None and request_context.request_id() is None
