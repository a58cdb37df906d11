"""One hypervisor per node under concurrency: registrations of one HW node at once (the
reference CLI's `hypervisors init --add`, as agents retrying it send it) through the real
API on loopback. The check and the write are under one lock (compute/resources.py):
exactly one is made, every other gets the 409 that names the node, nothing 500s."""

import uuid

from tests.configs.test_path_collisions import race

from .conftest import H, created
from .test_kinds import hw_node, init_add_body

RACERS = 6


def local_hypers_on(admin, node):
    return [h for h in admin.get(H).json
            if (h.get("driver_spec") or {}).get("kind") == "exordos_local_hyper"
            and h["driver_spec"].get("node") == node]


def assert_one_won(replies, node, ok):
    assert sorted(r.status for r in replies) == [ok] + [409] * (len(replies) - 1), replies
    for r in replies:
        if r.status == 409:
            assert r.json["type"] == "Conflict", r.json
            assert r.json["message"].startswith("driver_spec.node: hypervisor ")
            assert f"already runs on node {node}: update that one" in r.json["message"]


def test_concurrent_registrations_of_one_node_make_one_hypervisor(admin):
    for _ in range(2):
        node = hw_node(admin)["uuid"]
        bodies = [init_add_body(node, connection_uri=f"test:///{uuid.uuid4().hex}")
                  for _ in range(RACERS)]
        replies = race([lambda b=b: admin.post(H, b) for b in bodies])
        assert_one_won(replies, node, 201)
        made = local_hypers_on(admin, node)
        assert [h["uuid"] for h in made] == [r.json["uuid"] for r in replies
                                              if r.status == 201]


def test_concurrent_moves_onto_one_node_leave_one_there(admin):
    target = hw_node(admin)["uuid"]
    movers = [created(admin.post(H, init_add_body(
        hw_node(admin)["uuid"], connection_uri=f"test:///{uuid.uuid4().hex}")))
        for _ in range(RACERS)]
    specs = [{**m["driver_spec"], "node": target} for m in movers]
    replies = race([lambda m=m, s=s: admin.put(f"{H}/{m['uuid']}", {"driver_spec": s})
                    for m, s in zip(movers, specs)])
    assert_one_won(replies, target, 200)
    assert len(local_hypers_on(admin, target)) == 1
    # the losers kept their own node
    for m, r in zip(movers, replies):
        if r.status == 409:
            assert admin.get(f"{H}/{m['uuid']}").json["driver_spec"]["node"] == \
                m["driver_spec"]["node"]
