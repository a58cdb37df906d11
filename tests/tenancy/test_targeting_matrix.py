"""Who may target which node (appliance/tenancy/nodes.py, docs/security.md), as a matrix
against a real API server: each kind that names a node x (own node, another project's
node, the appliance's own node) x (owner, reader, other owner, admin).

Projects A (the victim) and B. The owner and the reader are A's; the other owner is B's
and, from its view, A's node is "another project's". The admin writes twice: in A's
record (it may target A's nodes, not B's, and not the appliance's node: A's owners could
edit that record afterwards), and in a record of the admin project (the platform's own:
it may target the appliance's node, and no project's node). Each refusal changes
nothing; each success is deleted again, so that cells do not depend on each other (a
node runs one DBaaS instance).
"""

import uuid

import pytest

from appliance.sqldb.versions import SEED_UUID
from tests.apiserver import ApiServer
from tests.compute.conftest import created, refused
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user
from tests.lb.conftest import LB_IMAGE
from tests.lb.helpers import LB, hw_node, register_appliance

CONFIGS, SERVICES, KEYS = "/v1/config/configs", "/v1/em/services", "/v1/secret/ssh_keys"
INSTANCES = "/v1/sqldb/instances"


class World:
    """Two projects with a node each, their users, the admin, the appliance's node."""

    def __init__(self, server):
        self.server = server
        self.admin = server.client(server.login("admin", ADMIN_PASSWORD))
        self.appliance = register_appliance(server.store)["uuid"]
        self.a, self.b = make_project(self.admin), make_project(self.admin)
        self.node = {self.a: hw_node(self.admin, self.a)["uuid"],
                     self.b: hw_node(self.admin, self.b)["uuid"],
                     ADMIN_PROJECT: hw_node(self.admin, ADMIN_PROJECT)["uuid"]}
        self.clients = {"owner": (self.user("owner", self.a), self.a),
                        "reader": (self.user("reader", self.a), self.a),
                        "other_owner": (self.user("owner", self.b), self.b),
                        "admin": (self.admin, self.a),
                        "admin_platform_record": (self.admin, ADMIN_PROJECT)}

    def user(self, role, project):
        user, name, password = make_user(self.admin)
        bind(self.admin, user, role, project)
        return self.server.client(self.server.login(name, password, scope=f"project:{project}"))

    def target(self, which, project):
        """The node `which` is, seen from a record of `project`."""
        if which == "platform":
            return self.appliance
        if which == "own":
            return self.node[project]
        return self.node[self.b if project in (self.a, ADMIN_PROJECT) else self.a]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    server = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                       lb_image=LB_IMAGE).start()
    yield World(server)
    server.stop()


def _name():
    return f"t{uuid.uuid4().hex[:8]}"


# kind: (collection, path, body(project, node uuid)); core_agent names no node: it is
# the appliance's node by its type
KINDS = {
    "config": ("config_configs", CONFIGS, lambda p, n: {
        "name": _name(), "project_id": p, "path": f"/etc/app/{_name()}.conf",
        "target": {"kind": "node", "node": n}, "body": {"kind": "text", "content": "x\n"}}),
    "service": ("em_services", SERVICES, lambda p, n: {
        "name": _name(), "project_id": p, "path": "sleep infinity",
        "target": {"kind": "node", "node": n}, "service_type": {"kind": "simple"}}),
    "ssh_key": ("secret_ssh_keys", KEYS, lambda p, n: {
        "name": _name(), "project_id": p, "user": "app",
        "target": {"kind": "node", "node": n}}),
    "lb_external_node": ("network_lb", LB, lambda p, n: {
        "name": _name(), "project_id": p,
        "type": {"kind": "external_node", "external_node": n}}),
    "lb_core_agent": ("network_lb", LB, lambda p, n: {
        "name": _name(), "project_id": p, "type": {"kind": "core_agent"}}),
    "sqldb_on_nodes": ("sqldb_instances", INSTANCES, lambda p, n: {
        "name": _name(), "project_id": p, "version": SEED_UUID, "cpu": 1, "ram": 512,
        "disk_size": 8, "placement": {"kind": "nodes", "nodes": [n]}}),
}

TARGETS = ("own", "other_project", "platform")
ACTORS = ("owner", "reader", "other_owner", "admin", "admin_platform_record")


def expected(kind, target, actor):
    """The status of the write: 201, or the refusal's."""
    if actor == "reader":
        return 403                              # a reader writes nothing
    if kind == "lb_core_agent":
        # the appliance's node by type: plainly the platform's (403) for a project's
        # caller; the admin is told why not in a project's record (400)
        return {"admin": 400, "admin_platform_record": 201}.get(actor, 403)
    if target == "own":
        return 201
    if target == "platform" and actor == "admin_platform_record":
        return 201
    return 400


CELLS = [pytest.param(kind, target, actor, id=f"{kind}-{target}-{actor}")
         for kind in KINDS for target in TARGETS for actor in ACTORS
         if kind != "lb_core_agent" or target == "platform"]


def snapshot(world, collection):
    return sorted((r["uuid"], r["revision"])
                  for r in world.server.store.collection(collection).records())


@pytest.mark.parametrize("kind,target,actor", CELLS)
def test_targeting(world, kind, target, actor):
    collection, path, body = KINDS[kind]
    client, project = world.clients[actor]
    node = world.target(target, project)
    before = snapshot(world, collection)
    resp = client.post(path, body(project, node))
    status = expected(kind, target, actor)
    if status == 201:
        record = created(resp)
        assert record["project_id"] == project
        assert world.admin.delete(f"{path}/{record['uuid']}").status == 204
        return
    message = refused(resp, status)
    assert snapshot(world, collection) == before
    if status == 403 and actor != "reader":
        assert "appliance's own node" in message
    if status == 400 and actor in ("owner", "other_owner"):
        # a project's caller learns nothing of what lies outside its project
        assert "not found" in message and "appliance" not in message


# ---- the other target shapes, and updates -----------------------------------------------

TARGETED = ("config", "service", "ssh_key")


@pytest.mark.parametrize("kind", TARGETED)
def test_a_nodes_list_with_the_appliance_node_among_its_own_is_refused(world, kind):
    collection, path, body = KINDS[kind]
    owner, project = world.clients["owner"]
    before = snapshot(world, collection)
    record = body(project, world.node[project])
    record["target"] = {"kind": "nodes", "nodes": [world.node[project], world.appliance]}
    assert "target.nodes.1" in refused(owner.post(path, record), 400)
    record["target"] = {"kind": "nodes", "nodes": [world.node[world.b]]}
    assert "target.nodes.0" in refused(owner.post(path, record), 400)
    assert snapshot(world, collection) == before


@pytest.mark.parametrize("kind", TARGETED)
def test_node_sets_of_the_project_only(world, kind):
    collection, path, body = KINDS[kind]
    owner, project = world.clients["owner"]
    sets = {}
    for p in (project, world.b, ADMIN_PROJECT):
        sets[p] = created(world.admin.post("/v1/compute/sets", {
            "name": _name(), "project_id": p, "cores": 1, "ram": 1024, "replicas": 0,
            "node_type": "HW"}))["uuid"]
    before = snapshot(world, collection)
    for foreign in (sets[world.b], sets[ADMIN_PROJECT]):
        record = {**body(project, None), "target": {"kind": "node_set", "node_set": foreign}}
        assert "not found" in refused(owner.post(path, record), 400)
    assert snapshot(world, collection) == before
    mine = created(owner.post(path, {**body(project, None), "target": {
        "kind": "node_set", "node_set": sets[project]}}))
    assert world.admin.delete(f"{path}/{mine['uuid']}").status == 204


@pytest.mark.parametrize("kind", TARGETED)
def test_an_update_cannot_move_a_target_onto_the_appliance_node(world, kind):
    collection, path, body = KINDS[kind]
    owner, project = world.clients["owner"]
    mine = created(owner.post(path, body(project, world.node[project])))
    before = snapshot(world, collection)
    for node in (world.appliance, world.node[world.b]):
        refused(owner.put(f"{path}/{mine['uuid']}", {"target": {"kind": "node",
                                                                "node": node}}), 400)
    # nor may the admin, in the project's record
    assert "appliance's own node" in refused(world.admin.put(
        f"{path}/{mine['uuid']}", {"target": {"kind": "node", "node": world.appliance}}), 400)
    assert snapshot(world, collection) == before
    assert world.admin.delete(f"{path}/{mine['uuid']}").status == 204


@pytest.mark.parametrize("kind", ("config", "service"))
def test_configs_and_services_on_the_appliance_node_are_refused_to_project_owners(world,
                                                                                 kind):
    """A config is a root-owned file (with an on_change shell command), a service a root
    command: on the appliance's node either is the appliance."""
    collection, path, body = KINDS[kind]
    before = snapshot(world, collection)
    for actor in ("owner", "other_owner"):
        client, project = world.clients[actor]
        message = refused(client.post(path, body(project, world.appliance)), 400)
        assert f"node {world.appliance} not found in project {project}" in message
    assert snapshot(world, collection) == before
    # the platform's own record may
    made = created(world.admin.post(path, body(ADMIN_PROJECT, world.appliance)))
    assert world.admin.delete(f"{path}/{made['uuid']}").status == 204


def test_lb_type_changed_to_core_agent_or_a_foreign_node_is_refused(world):
    owner, project = world.clients["owner"]
    lb = created(owner.post(LB, {"name": _name(), "type": {
        "kind": "external_node", "external_node": world.node[project]}}))
    before = snapshot(world, "network_lb")
    assert "appliance's own node" in refused(owner.put(f"{LB}/{lb['uuid']}", {
        "type": {"kind": "core_agent"}}), 403)
    for node in (world.appliance, world.node[world.b]):
        assert "not found" in refused(owner.put(f"{LB}/{lb['uuid']}", {"type": {
            "kind": "external_node", "external_node": node}}), 400)
    assert "admin project" in refused(world.admin.put(f"{LB}/{lb['uuid']}", {
        "type": {"kind": "core_agent"}}), 400)
    assert snapshot(world, "network_lb") == before
    assert world.admin.delete(f"{LB}/{lb['uuid']}").status == 204


# ---- the rule again where records are rendered -------------------------------------------

def test_records_stored_before_the_rule_are_not_delivered_off_their_project(world):
    """Services once let an admin target any project's node from any record. Records
    like that (put in the store directly, as they were written then) reach no agent: the
    producers of configs, services and SSH keys deliver a record only to nodes of its own
    project, so neither the appliance's node nor another project's gets A's records."""
    from appliance.agent.targets import View
    from appliance.configs import targets as config_targets
    from appliance.secret import ssh_targets
    from appliance.service import targets as service_targets
    store = world.server.store
    owner, project = world.clients["owner"]
    made = {}
    for kind, producer in (("config", config_targets), ("service", service_targets),
                           ("ssh_key", ssh_targets)):
        collection, path, body = KINDS[kind]
        record = created(owner.post(path, body(project, world.node[project])))
        store.collection(collection).update(record["uuid"], {"target": {
            "kind": "nodes", "nodes": [world.node[project], world.appliance,
                                       world.node[world.b]]}})
        made[kind] = (producer, record["uuid"], path)
    nodes = store.collection("compute_nodes")
    for kind, (producer, uuid_, path) in made.items():
        def masters(node_uuid):
            return [i["master"] for i in producer.for_node(View(store), nodes.get(node_uuid))]
        assert uuid_ in masters(world.node[project]), kind
        assert uuid_ not in masters(world.appliance), kind
        assert uuid_ not in masters(world.node[world.b]), kind
        assert world.admin.delete(f"{path}/{uuid_}").status == 204
