"""The action migrate of a node: its rules and who may ask (docs/compute.md, "Moving a
node"; docs/security.md, compute).

The API is a real server; no compute daemon runs here, so what the daemon would write
(hypervisors ACTIVE with their capacity, accel and arch; a node placed and ACTIVE) is
written into the store directly, as the daemon writes it. Every refusal is shown with
nothing changed (the node's record and revision as before)."""

import threading
import uuid

import pytest

from .conftest import ADMIN_PROJECT, H, N, P, created, node_body, refused

HV_FIELDS = {"status": "ACTIVE", "status_reason": None, "all_cores": 16, "all_ram": 8192,
             "all_disk": 100, "accel": "tcg", "arch": "x86_64"}


def hypervisor(server, admin, **fields):
    hv = created(admin.post(H, {"name": f"hv-{uuid.uuid4().hex[:6]}", "driver_spec": {
        "kind": "libvirt", "connection_uri": f"test:///default?hv={uuid.uuid4().hex}",
        "storage_pool": "default-pool"}}))
    return server.store.collection("compute_hypervisors").update(
        hv["uuid"], {**HV_FIELDS, **fields})


def active_node(server, client, hv, project=ADMIN_PROJECT, **fields):
    node = created(client.post(N, node_body(project_id=project, **fields)))
    return server.store.collection("compute_nodes").update(
        node["uuid"], {"hypervisor": hv["uuid"], "status": "ACTIVE"})


def migrate(client, node, body=None):
    return client.post(f"{N}/{node['uuid']}/actions/migrate/invoke",
                       {} if body is None else body)


def stored(server, node):
    return server.store.collection("compute_nodes").get(node["uuid"])


@pytest.fixture
def pair(server, admin):
    """Two fresh ACTIVE hypervisors of one accel and arch; every other hypervisor of the
    module is put in ERROR, so placement's choice is between these two."""
    coll = server.store.collection("compute_hypervisors")
    for hv in coll.records():
        coll.update(hv["uuid"], {"status": "ERROR", "status_reason": "another test's"})
    return hypervisor(server, admin), hypervisor(server, admin)


def test_migrate_writes_the_request_only(server, admin, pair):
    a, b = pair
    node = active_node(server, admin, a)
    resp = migrate(admin, node, {"hypervisor": f"{H}/{b['uuid']}"})
    assert resp.status == 200, resp
    m = resp.json["migration"]
    assert (m["target"], m["source"], m["state"], m["progress"], m["reason"]) == (
        b["uuid"], a["uuid"], "requested", None, None)
    assert m["requested_at"] and m["finished_at"] is None
    # the API never moves the node: the daemon does, and writes hypervisor at the end
    now = stored(server, node)
    assert (now["hypervisor"], now["status"]) == (a["uuid"], "ACTIVE")
    # a second ask while the first is under way is refused
    assert "already being moved" in refused(migrate(admin, node, {"hypervisor": b["uuid"]}),
                                            409)
    assert stored(server, node)["revision"] == now["revision"]


def test_without_a_target_placement_picks_the_best_other(server, admin, pair):
    a, b = pair
    # b has less RAM free than c: placement's key (free RAM after placing) picks c
    c = hypervisor(server, admin)
    active_node(server, admin, b, ram=4096)
    node = active_node(server, admin, a)
    answer = migrate(admin, node)
    assert answer.status == 200, answer
    assert answer.json["migration"]["target"] == c["uuid"]
    # the move holds room on c: the hypervisor's free RAM counts it for the next move
    other = active_node(server, admin, a, ram=2048)
    assert migrate(admin, other).json["migration"]["target"] == c["uuid"]
    third = active_node(server, admin, a, ram=4096)
    # c now holds 1024 + 2048 in moves (5120 free), b 4096 (4096 free): c still
    assert migrate(admin, third).json["migration"]["target"] == c["uuid"]
    fourth = active_node(server, admin, a, ram=4096)
    # c has 1024 free now, b 4096: only b fits
    assert migrate(admin, fourth).json["migration"]["target"] == b["uuid"]


def _refused_unchanged(server, admin, node, body, status, words):
    before = stored(server, node)
    message = refused(migrate(admin, node, body), status)
    assert words in message, message
    assert stored(server, node) == before
    return message


def test_refusals_change_nothing(server, admin, pair):
    a, b = pair
    node = active_node(server, admin, a)
    _refused_unchanged(server, admin, node, {"hypervisor": str(uuid.uuid4())}, 404,
                       "not found")
    _refused_unchanged(server, admin, node, {"hypervisor": "nonsense"}, 404, "not found")
    _refused_unchanged(server, admin, node, {"hypervisor": a["uuid"]}, 409,
                       "already runs on hypervisor")
    _refused_unchanged(server, admin, node, {"hypervisor": b["uuid"], "speed": 1}, 400,
                       "speed")
    _refused_unchanged(server, admin, node, {"hypervisor": 7}, 400, "hypervisor")
    hvs = server.store.collection("compute_hypervisors")
    hvs.update(b["uuid"], {"status": "ERROR", "status_reason": "down"})
    _refused_unchanged(server, admin, node, {"hypervisor": b["uuid"]}, 409, "is ERROR")
    _refused_unchanged(server, admin, node, {}, 409, "no other ACTIVE hypervisor")
    hvs.update(b["uuid"], {"status": "ACTIVE", "accel": "kvm"})
    _refused_unchanged(server, admin, node, {"hypervisor": b["uuid"]}, 409,
                       "cannot change accelerator")
    _refused_unchanged(server, admin, node, {}, 409, "no other ACTIVE hypervisor")
    hvs.update(b["uuid"], {"accel": "tcg", "arch": "aarch64"})
    _refused_unchanged(server, admin, node, {"hypervisor": b["uuid"]}, 409,
                       "CPU architecture")
    hvs.update(b["uuid"], {"arch": "x86_64", "all_ram": 512})
    _refused_unchanged(server, admin, node, {"hypervisor": b["uuid"]}, 409,
                       "enough RAM (needs 1024 MB, at most 512 MB free)")
    _refused_unchanged(server, admin, node, {}, 409, "enough RAM")
    hvs.update(b["uuid"], {"all_ram": 8192})
    # the node itself: not ACTIVE, or HW
    nodes = server.store.collection("compute_nodes")
    for status in ("IN_PROGRESS", "ERROR", "SCHEDULED"):
        nodes.update(node["uuid"], {"status": status})
        _refused_unchanged(server, admin, node, {"hypervisor": b["uuid"]}, 409,
                           f"is {status}: only an ACTIVE node is moved")
    nodes.update(node["uuid"], {"status": "ACTIVE", "power_state": "off"})
    _refused_unchanged(server, admin, node, {"hypervisor": b["uuid"]}, 409,
                       "powered off: a move is live")
    nodes.update(node["uuid"], {"power_state": "on"})
    hw = created(admin.post(N, node_body(node_type="HW", disk_spec=None)))
    _refused_unchanged(server, admin, hw, {"hypervisor": b["uuid"]}, 409, "HW machine")
    # the node's own hypervisor down: nothing can be moved off it live
    nodes.update(node["uuid"], {"status": "ACTIVE"})
    hvs.update(a["uuid"], {"status": "ERROR", "status_reason": "gone"})
    _refused_unchanged(server, admin, node, {"hypervisor": b["uuid"]}, 409,
                       "from an ACTIVE hypervisor")


def test_a_move_that_breaks_hard_anti_affinity_is_refused(server, admin, pair):
    a, b = pair
    policy = created(admin.post(P, {"name": "spread", "project_id": ADMIN_PROJECT,
                                    "kind": "hard-anti-affinity"}))
    first = active_node(server, admin, a, placement_policies=[policy["uuid"]])
    active_node(server, admin, b, placement_policies=[policy["uuid"]])
    _refused_unchanged(server, admin, first, {"hypervisor": b["uuid"]}, 409,
                       "placement policy 'spread' (hard-anti-affinity)")
    _refused_unchanged(server, admin, first, {}, 409, "placement policy 'spread'")


def test_a_set_member_keeps_its_sets_spread(server, admin, pair):
    """Members of a set that names a hard anti-affinity policy: the move of one onto the
    other's hypervisor is refused."""
    a, b = pair
    policy = created(admin.post(P, {"name": "set-spread", "project_id": ADMIN_PROJECT,
                                    "kind": "hard-anti-affinity"}))
    members = []
    for hv in (a, b):
        member = active_node(server, admin, hv, placement_policies=[policy["uuid"]])
        members.append(server.store.collection("compute_nodes").update(
            member["uuid"], {"node_set": str(uuid.uuid4())}))
    _refused_unchanged(server, admin, members[0], {"hypervisor": b["uuid"]}, 409,
                       "hard-anti-affinity")


def test_concurrent_moves_do_not_overfill_a_hypervisor(server, admin, pair):
    a, b = pair
    server.store.collection("compute_hypervisors").update(b["uuid"], {"all_ram": 3072})
    movers = [active_node(server, admin, a, ram=1024) for _ in range(6)]
    answers = []

    def ask(node):
        answers.append(migrate(admin, node, {"hypervisor": b["uuid"]}).status)

    threads = [threading.Thread(target=ask, args=(n,)) for n in movers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200] * 3 + [409] * 3
    assert sum(1 for n in movers if (stored(server, n).get("migration") or {})
               .get("target") == b["uuid"]) == 3


@pytest.fixture(scope="module")
def reader(server, admin, member):
    from tests.iam.helpers import bind, make_user
    user, name, password = make_user(admin)
    bind(admin, user, "reader", member.project)
    return server.client(server.login(name, password, scope=f"project:{member.project}"))


def test_who_may_migrate(server, admin, member, other, reader, pair):
    """The tenant matrix: owner, reader, another project's owner and the admin, each
    against a node of the owner's project, of another project, and of the platform."""
    a, b = pair
    own = active_node(server, admin, a, project=member.project)
    others = active_node(server, admin, a, project=other.project)
    platforms = active_node(server, admin, a)
    expected = {
        "owner": {"own": 403, "other's": 404, "platform's": 404},
        # a reader lacks compute.node.migrate: 403 before any node is looked up, so
        # the answer tells nothing of another project's nodes
        "reader": {"own": 403, "other's": 403, "platform's": 403},
        "other owner": {"own": 404, "other's": 403, "platform's": 404},
    }
    callers = {"owner": member.client, "reader": reader, "other owner": other.client}
    nodes = {"own": own, "other's": others, "platform's": platforms}
    for who, client in callers.items():
        for whose, node in nodes.items():
            for body in ({}, {"hypervisor": b["uuid"]}):
                before = stored(server, node)
                refused(migrate(client, node, body), expected[who][whose])
                assert stored(server, node) == before, (who, whose)
    # the owner's message says whom to ask
    assert "platform's" in refused(migrate(member.client, own), 403)
    # the admin moves any of them (a named target, and one placement picks)
    assert migrate(admin, own, {"hypervisor": b["uuid"]}).status == 200
    assert migrate(admin, others).json["migration"]["target"] == b["uuid"]
    assert migrate(admin, platforms).status == 200

