"""One writer per file (appliance/configs/paths.py, docs/configs.md): two configs that
write the same path on a common node are refused with 409, on create and on a PUT that
changes the path or the target, also when many requests race; a pair that meets on a node
anyway (written before the rule, then a node joins their set) delivers only the earlier
config there, and the later one is ERROR naming it.

Everything runs against the real API on a Waitress server on loopback; the producer and
the status step are called directly on the server's store, as the delivery daemon calls
them."""

import os
import threading
import uuid

import pytest

from appliance.agent.client import AgentClient
from appliance.agent.host import Host
from appliance.agent.runner import Runner
from appliance.agent.status import aggregate
from appliance.agent.targets import View, items_for
from appliance.compute.sets import reconcile_sets
from appliance.configs.node import Driver
from appliance.configs.paths import path_key
from appliance.configs.targets import for_node
from tests.agent.conftest import enroll
from tests.compute.conftest import S, Member, created, refused
from tests.iam.helpers import ADMIN_PROJECT

from .fakehost import ALLOWED, write_passwd
from .helpers import C, config_body, hw_node, node_set

CONFIGS = "config_configs"
BOOKKEEPING = ("uuid", "created_at", "updated_at", "revision")


def reference_body(node, path="/var/lib/exordos/app.env", **fields):
    """What the reference CLI's `configs add-from-env` POSTs (reference-api.md section 4)."""
    return {"uuid": str(uuid.uuid4()), "name": "envs",
            "target": {"kind": "node", "node": node},
            "path": path, "body": {"content": "PORT=80\n", "kind": "text"},
            "project_id": ADMIN_PROJECT, **fields}


def configs_at(server, path):
    return [c for c in server.store.collection(CONFIGS).records() if c["path"] == path]


def unique_path():
    return f"/etc/app/{uuid.uuid4().hex[:8]}.conf"


def set_with_member(server, admin, project=ADMIN_PROJECT, client=None):
    """A node set of one member, made as the compute daemon makes it (reconcile_sets)."""
    client = client or admin
    body = {"name": f"s-{uuid.uuid4().hex[:8]}", "project_id": project, "cores": 1,
            "ram": 1024, "replicas": 1,
            "disk_spec": {"kind": "root_disk", "image": "https://images.example.test/b.raw"}}
    s = created(client.post(S, body))
    reconcile_sets(server.store)
    [member] = server.store.collection("compute_nodes").by("node_set", s["uuid"])
    return s, member


def conflict(resp, *named):
    """A 409 Conflict whose message names each of `named`; the message."""
    message = refused(resp, 409)
    assert resp.json["type"] == "Conflict"
    for text in named:
        assert text in message, message
    return message


# ---- create ---------------------------------------------------------------------------------

def test_the_reference_body_twice_is_409_and_nothing_is_created(server, admin):
    node = hw_node(admin)["uuid"]
    first = created(admin.post(C, reference_body(node)))
    second = reference_body(node)
    message = conflict(admin.post(C, second), "envs", first["uuid"], node,
                       "/var/lib/exordos/app.env")
    assert "use another path" in message
    assert admin.get(f"{C}/{second['uuid']}").status == 404
    assert [c["uuid"] for c in configs_at(server, "/var/lib/exordos/app.env")
            if c["target"].get("node") == node] == [first["uuid"]]
    # the first one is untouched and still writes the file
    assert admin.get(f"{C}/{first['uuid']}").json["path"] == "/var/lib/exordos/app.env"


def test_other_spellings_of_a_path_are_refused_not_compared(server, admin):
    """`/etc//x`, `/etc/./x` and `/etc/x/` would be the same file: the path rule refuses
    them (400), so no second spelling of a path reaches the store; the comparison key
    folds them anyway, for records written before that rule."""
    node = hw_node(admin)["uuid"]
    path = unique_path()
    created(admin.post(C, config_body(node, path=path)))
    head, tail = path.rsplit("/", 1)
    for spelling in (f"{head}//{tail}", f"{head}/./{tail}", f"{path}/"):
        assert "path" in refused(admin.post(C, config_body(node, path=spelling)), 400)
        assert path_key(spelling) == path_key(path) == path
    assert len(configs_at(server, path)) == 1


def test_same_path_on_other_nodes_and_other_paths_on_one_node_are_fine(server, admin):
    a, b = hw_node(admin)["uuid"], hw_node(admin)["uuid"]
    path = unique_path()
    created(admin.post(C, config_body(a, path=path)))
    created(admin.post(C, config_body(b, path=path)))
    created(admin.post(C, config_body(a, path=unique_path())))
    # a file next to it, or a directory level above, is another file
    created(admin.post(C, config_body(a, path=path + ".d")))
    assert len(configs_at(server, path)) == 2


def test_node_lists_and_sets_overlap(server, admin):
    s, member = set_with_member(server, admin)
    alone, other = hw_node(admin)["uuid"], hw_node(admin)["uuid"]
    path = unique_path()
    by_node = created(admin.post(C, config_body(member["uuid"], path=path)))
    # the set reaches its member, which the first config already writes to
    conflict(admin.post(C, config_body(alone, path=path, target={
        "kind": "node_set", "node_set": s["uuid"]})), by_node["uuid"], member["uuid"])
    # a list that names the member among others
    conflict(admin.post(C, config_body(alone, path=path, target={
        "kind": "nodes", "nodes": [alone, member["uuid"].upper()]})), by_node["uuid"])
    by_list = created(admin.post(C, config_body(alone, path=path, target={
        "kind": "nodes", "nodes": [alone, other]})))
    conflict(admin.post(C, config_body(other, path=path)), by_list["uuid"], other)
    assert sorted(c["uuid"] for c in configs_at(server, path)) == sorted(
        [by_node["uuid"], by_list["uuid"]])


def test_one_set_named_twice_collides_even_while_empty(server, admin):
    """An empty set's future members would get both: refused at once, not at the first
    member."""
    empty = node_set(admin)
    node = hw_node(admin)["uuid"]
    path = unique_path()
    target = {"kind": "node_set", "node_set": empty["uuid"]}
    first = created(admin.post(C, config_body(node, path=path, target=target)))
    conflict(admin.post(C, config_body(node, path=path, target=target)),
             first["uuid"], f"the nodes of set {empty['uuid']}")
    # the set and a node outside it do not meet
    created(admin.post(C, config_body(node, path=path)))
    assert len(configs_at(server, path)) == 2


# ---- PUT ------------------------------------------------------------------------------------

def test_put_into_a_collision_is_409_and_changes_nothing(server, admin):
    a, b = hw_node(admin)["uuid"], hw_node(admin)["uuid"]
    path = unique_path()
    first = created(admin.post(C, reference_body(a, path=path)))
    moving = created(admin.post(C, config_body(a)))
    elsewhere = created(admin.post(C, config_body(b, path=path)))
    store = server.store.collection(CONFIGS)
    before = {u: store.get(u) for u in (first["uuid"], moving["uuid"], elsewhere["uuid"])}
    # the path changes onto the file the first one writes
    conflict(admin.put(f"{C}/{moving['uuid']}", {"path": path}), "envs", first["uuid"])
    # the target changes onto the node the first one writes the path on
    conflict(admin.put(f"{C}/{elsewhere['uuid']}", {"target": {"kind": "node", "node": a}}),
             first["uuid"])
    conflict(admin.put(f"{C}/{elsewhere['uuid']}", {"target": {"kind": "nodes",
                                                               "nodes": [b, a]}}),
             first["uuid"])
    assert {u: store.get(u) for u in before} == before
    # a PUT that keeps path and target, or moves to a free path, passes
    resp = admin.put(f"{C}/{first['uuid']}", {"body": {"kind": "text", "content": "x\n"},
                                              "path": path})
    assert resp.status == 200, resp
    resp = admin.put(f"{C}/{moving['uuid']}", {"path": unique_path()})
    assert resp.status == 200, resp


# ---- a node joins a set ---------------------------------------------------------------------

def test_a_node_joining_a_set_delivers_only_the_earlier_config(server, admin):
    """The API never stores such a pair; a state written before the rule may hold one
    (inserted here into the store, as an older appliance wrote it). When a member joins
    the set, the later config is ERROR on it, naming the earlier, and is not delivered;
    the earlier one is delivered as before."""
    empty = node_set(admin)
    path = unique_path()
    target = {"kind": "node_set", "node_set": empty["uuid"]}
    earlier = created(admin.post(C, config_body(hw_node(admin)["uuid"], path=path,
                                                target=target, name="earlier")))
    later = insert_legacy(server, earlier, name="later",
                          body={"kind": "text", "content": "the later one\n"})
    assert later["created_at"] > earlier["created_at"]

    resp = admin.put(f"{S}/{empty['uuid']}", {"replicas": 1})
    assert resp.status == 200, resp
    reconcile_sets(server.store)
    [member] = server.store.collection("compute_nodes").by("node_set", empty["uuid"])

    items = {i["master"]: i for i in for_node(View(server.store), member)}
    assert items[earlier["uuid"]]["value"]["content"] == "hello\n"
    assert items[earlier["uuid"]]["value"]["path"] == path
    blocked = items[later["uuid"]]
    assert blocked["value"] is None and blocked["refused"] is True
    assert "earlier" in blocked["unavailable"] and earlier["uuid"] in blocked["unavailable"]
    # the agent's payload: the later item carries nothing to write
    payload = {i["master"]: i for i in items_for(View(server.store), member)[0]}
    assert payload[later["uuid"]]["value"] is None

    aggregate(server.store, CONFIGS)
    shown = admin.get(f"{C}/{later['uuid']}").json
    assert shown["status"] == "ERROR"
    assert shown["status_reason"].startswith(f"node {member['name']}: path {path}")
    assert earlier["uuid"] in shown["status_reason"]
    assert shown["node_status"][member["uuid"]]["status"] == "ERROR"
    first = admin.get(f"{C}/{earlier['uuid']}").json
    # no agent on the member: waiting, not refused
    assert first["status"] == "IN_PROGRESS"
    assert first["node_status"][member["uuid"]]["reason"] == "no agent is enrolled on the node"

    # the later one is fixed by moving it to a free path: delivered from then on
    resp = admin.put(f"{C}/{later['uuid']}", {"path": unique_path()})
    assert resp.status == 200, resp
    items = {i["master"]: i for i in for_node(View(server.store), member)}
    assert items[later["uuid"]]["value"]["content"] == "the later one\n"
    assert "refused" not in items[later["uuid"]]


def insert_legacy(server, like, **fields):
    """A config written straight into the store, as an appliance before the rule could
    hold it: `like`'s fields with `fields` over them, created now."""
    legacy = {k: v for k, v in server.store.collection(CONFIGS).get(like["uuid"]).items()
              if k not in BOOKKEEPING}
    return server.store.collection(CONFIGS).insert({**legacy, "uuid": str(uuid.uuid4()),
                                                    **fields})


# ---- on the node: the real agent runner and config driver -----------------------------------

class NodeAgent:
    """The node agent's runner with the config driver, in this process, enrolled for a
    node of the real API, over a root prefix (each step() is one poll and its apply)."""

    def __init__(self, server, admin, node_uuid, base):
        cred = enroll(server, admin, node_uuid)
        self.root = os.path.join(str(base), "root")
        os.makedirs(self.root)
        write_passwd(self.root)
        client = AgentClient(f"http://127.0.0.1:{server.port}", cred["agent"],
                             cred["secret"])
        host = Host(root=self.root, allowed_roots=ALLOWED,
                    state_dir=os.path.join(str(base), "state"), api=client,
                    node=node_uuid, agent=cred["agent"])
        self.runner = Runner(host, client, drivers={"config": Driver}, wait=0)

    def step(self):
        self.runner.step()

    def file(self, path):
        try:
            with open(os.path.join(self.root, path.lstrip("/"))) as f:
                return f.read()
        except FileNotFoundError:
            return None


def test_a_member_joining_with_a_real_agent_gets_the_earlier_file(server, admin, tmp_path):
    empty = node_set(admin)
    path = unique_path()
    target = {"kind": "node_set", "node_set": empty["uuid"]}
    earlier = created(admin.post(C, config_body(hw_node(admin)["uuid"], path=path,
                                                target=target, name="earlier")))
    later = insert_legacy(server, earlier, name="later",
                          body={"kind": "text", "content": "the later one\n"})
    assert admin.put(f"{S}/{empty['uuid']}", {"replicas": 1}).status == 200
    reconcile_sets(server.store)
    [member] = server.store.collection("compute_nodes").by("node_set", empty["uuid"])
    agent = NodeAgent(server, admin, member["uuid"], tmp_path)
    agent.step()
    assert agent.file(path) == "hello\n"
    aggregate(server.store, CONFIGS)
    assert admin.get(f"{C}/{earlier['uuid']}").json["status"] == "ACTIVE"
    shown = admin.get(f"{C}/{later['uuid']}").json
    assert shown["status"] == "ERROR" and earlier["uuid"] in shown["status_reason"]
    # the later one goes: the earlier one's file stays
    server.store.collection(CONFIGS).delete(later["uuid"])
    agent.step()
    assert agent.file(path) == "hello\n"


def test_a_node_that_held_both_hands_the_file_to_the_earlier(server, admin, tmp_path):
    """A node that applied a later config before the rule (alone on the node then),
    when the earlier config comes to that node too: the later one is refused there, the
    agent forgets it without removing the file, and writes the earlier one's content."""
    node, elsewhere = hw_node(admin)["uuid"], hw_node(admin)["uuid"]
    path = unique_path()
    earlier = created(admin.post(C, config_body(elsewhere, path=path, name="earlier")))
    later = insert_legacy(server, earlier, name="later", target={"kind": "node", "node": node},
                          body={"kind": "text", "content": "the later one\n"})
    agent = NodeAgent(server, admin, node, tmp_path)
    agent.step()
    assert agent.file(path) == "the later one\n"
    # the earlier config's target grows to the node, as a PUT could before the rule
    configs = server.store.collection(CONFIGS)
    configs.update(earlier["uuid"], {"target": {"kind": "nodes", "nodes": [elsewhere, node]}})
    agent.step()
    assert agent.file(path) == "hello\n"
    assert later["uuid"] not in {e["item"]["master"] for e in agent.runner.applied.values()}
    configs.delete(later["uuid"])
    agent.step()
    assert agent.file(path) == "hello\n"


def test_deleting_one_config_and_creating_another_of_its_path_keeps_the_file(
        server, admin, tmp_path):
    """Both in one payload: the new config's file is written, and removing the old
    config's item must not delete it."""
    node = hw_node(admin)["uuid"]
    path = unique_path()
    old = created(admin.post(C, config_body(node, path=path)))
    agent = NodeAgent(server, admin, node, tmp_path)
    agent.step()
    assert agent.file(path) == "hello\n"
    assert admin.delete(f"{C}/{old['uuid']}").status == 204
    created(admin.post(C, config_body(node, path=path,
                                      body={"kind": "text", "content": "new\n"})))
    agent.step()
    assert agent.file(path) == "new\n"


# ---- concurrency ----------------------------------------------------------------------------

def race(requests):
    """Run the callables at once (a barrier), each in its own thread; their responses."""
    barrier = threading.Barrier(len(requests))
    out = [None] * len(requests)

    def run(i):
        barrier.wait()
        out[i] = requests[i]()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("round_", range(2))
def test_concurrent_creates_of_one_path_on_one_node_make_one(server, admin, round_):
    node = hw_node(admin)["uuid"]
    path = unique_path()
    replies = race([lambda: admin.post(C, reference_body(node, path=path))
                    for _ in range(6)])
    assert sorted(r.status for r in replies) == [201] + [409] * 5, replies
    assert all(r.json["type"] == "Conflict" for r in replies if r.status == 409)
    assert len(configs_at(server, path)) == 1


def test_concurrent_creates_in_a_project_under_quotas_make_one(server, admin):
    """A project's writes take the quota lock too: both locks, always in one order."""
    owner = Member(server, admin)
    s, member = set_with_member(server, admin, owner.project, owner.client)
    path = unique_path()
    bodies = [config_body(member["uuid"], project=owner.project, path=path),
              config_body(member["uuid"], project=owner.project, path=path,
                          target={"kind": "node_set", "node_set": s["uuid"]})] * 3
    replies = race([lambda b=b: owner.client.post(C, b) for b in bodies])
    assert sorted(r.status for r in replies) == [201] + [409] * 5, replies
    assert len(configs_at(server, path)) == 1


def test_concurrent_puts_onto_one_path_leave_one(server, admin):
    node = hw_node(admin)["uuid"]
    path = unique_path()
    movers = [created(admin.post(C, config_body(node))) for _ in range(4)]
    replies = race([lambda m=m: admin.put(f"{C}/{m['uuid']}", {"path": path})
                    for m in movers])
    assert sorted(r.status for r in replies) == [200] + [409] * 3, replies
    assert len(configs_at(server, path)) == 1
