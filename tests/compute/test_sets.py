"""Node sets: the pure member plan, then the store step against the real API, with the
tests writing member statuses into the store as the compute daemon would."""

import uuid

import pytest

from appliance.compute.sets import plan, reconcile_sets

from .conftest import IMAGE, ADMIN_PROJECT, N, S, created, node_body, refused

IMAGE2 = IMAGE.replace("base", "base-2")


def a_set(**fields):
    return {"uuid": str(uuid.uuid4()), "name": "web", "project_id": ADMIN_PROJECT,
            "replicas": 3, "cores": 1, "ram": 1024, "node_type": "VM", "network": None,
            "disk_spec": {"kind": "root_disk", "image": IMAGE, "size": 10, "tier": "WARM",
                          "ephemeral": True},
            "placement_policies": [], "status": "NEW", "status_reason": None, "nodes": {},
            "revision": 1, **fields}


def members_of(node_set, statuses):
    """Members as the store holds them once the plan's creations are written."""
    out = []
    for i, new in enumerate(plan({**node_set, "replicas": len(statuses)}, []).create):
        new.update(status=statuses[i], revision=1, created_at=f"2026-01-01T00:00:0{i}Z")
        out.append(new)
    return out


# ---- the plan ------------------------------------------------------------------------------

def test_scale_up_creates_the_missing_members_with_the_sets_shape():
    s = a_set(placement_policies=["p"])
    step = plan(s, [])
    assert [(m["name"], m["set_index"]) for m in step.create] == [
        ("web-0", 0), ("web-1", 1), ("web-2", 2)]
    for m in step.create:
        assert (m["cores"], m["ram"], m["disk_spec"], m["placement_policies"]) == (
            1, 1024, s["disk_spec"], ["p"])
        assert m["node_set"] == s["uuid"] and m["status"] == "NEW"
    assert not step.delete and not step.update
    assert step.set_changes["status"] == "IN_PROGRESS"
    assert {v["name"] for v in step.set_changes["nodes"].values()} == {"web-0", "web-1",
                                                                       "web-2"}


def test_a_missing_member_in_the_middle_is_made_again_with_its_number():
    s = a_set()
    members = members_of(s, ["ACTIVE"] * 3)
    step = plan(s, [members[0], members[2]])
    assert [m["name"] for m in step.create] == ["web-1"]


def test_scale_down_removes_the_highest_numbered_members():
    s = a_set()
    members = members_of(s, ["ACTIVE"] * 5)
    step = plan(s, members)
    assert step.delete == [members[4]["uuid"], members[3]["uuid"]]
    assert not step.create and not step.update
    assert step.set_changes["status"] == "ACTIVE"
    assert set(step.set_changes["nodes"]) == {m["uuid"] for m in members[:3]}
    assert plan(a_set(replicas=0), members).delete == [m["uuid"] for m in members[::-1]]


def test_a_duplicate_member_number_keeps_the_oldest():
    s = a_set(replicas=1)
    first, = members_of(s, ["ACTIVE"])
    twin = {**first, "uuid": str(uuid.uuid4()), "created_at": "2026-02-01T00:00:00Z"}
    assert plan(s, [twin, first]).delete == [twin["uuid"]]


def test_status_follows_the_members():
    s = a_set()
    assert plan(s, members_of(s, ["ACTIVE", "IN_PROGRESS", "ACTIVE"])).set_changes[
        "status"] == "IN_PROGRESS"
    members = members_of(s, ["ACTIVE", "ERROR", "ACTIVE"])
    members[1]["status_reason"] = "no hypervisor has 1 free core"
    changes = plan(s, members).set_changes
    assert (changes["status"], changes["status_reason"]) == (
        "ERROR", "web-1: no hypervisor has 1 free core")
    assert changes["nodes"][members[1]["uuid"]] == {"name": "web-1", "ipv4": None,
                                                    "status": "ERROR"}
    members = members_of(s, ["ACTIVE"] * 3)
    members[0]["default_network"] = {"ipv4": "10.20.0.20"}
    changes = plan(s, members).set_changes
    assert changes["status"] == "ACTIVE" and "status_reason" not in changes
    assert changes["nodes"][members[0]["uuid"]]["ipv4"] == "10.20.0.20"
    # nothing to write when nothing changed: the daemon is woken by every write
    settled = {**s, **changes}
    assert plan(settled, members).set_changes == {}
    assert plan(a_set(replicas=0), []).set_changes["status"] == "ACTIVE"


def roll(s, members):
    """The members after the plan's updates, as the store would hold them."""
    step = plan(s, members)
    updated = []
    for m in members:
        if m["uuid"] in step.update:
            m = {**m, **step.update[m["uuid"]][1], "revision": m["revision"] + 1}
        updated.append(m)
    return step, updated


def test_a_new_image_rolls_one_member_at_a_time():
    s = a_set()
    members = members_of(s, ["ACTIVE"] * 3)
    s2 = {**s, "disk_spec": {**s["disk_spec"], "image": IMAGE2}}
    order = []
    for _ in range(3):
        step, members = roll(s2, members)
        assert len(step.update) == 1
        (changed, (revision, changes)), = step.update.items()
        assert changes["disk_spec"]["image"] == IMAGE2 and changes["status"] == "IN_PROGRESS"
        order.append(next(m["name"] for m in members if m["uuid"] == changed))
        # while the updated member is not ACTIVE again, nothing else moves
        step, members = roll(s2, members)
        assert not step.update and step.set_changes["status"] == "IN_PROGRESS"
        for m in members:
            if m["uuid"] == changed:
                m["status"] = "ACTIVE"
    assert order == ["web-0", "web-1", "web-2"]
    step, members = roll(s2, members)
    assert not step.update and step.set_changes["status"] == "ACTIVE"


def test_the_roll_stops_at_the_first_failure_and_a_fix_retries_it_first():
    s = a_set()
    members = members_of(s, ["ACTIVE"] * 3)
    bad = {**s, "disk_spec": {**s["disk_spec"], "image": IMAGE2}}
    step, members = roll(bad, members)
    members[0].update(status="ERROR", status_reason="image download failed: 404")
    for _ in range(2):
        step, members = roll(bad, members)
        assert not step.update
        assert step.set_changes["status_reason"] == "web-0: image download failed: 404"
    assert [m["disk_spec"]["image"] for m in members] == [IMAGE2, IMAGE, IMAGE]
    fixed = {**s, "disk_spec": {**s["disk_spec"], "image": IMAGE + "?v=3"}}
    # web-1 and web-2 are ACTIVE: the failed member goes first all the same
    step, members = roll(fixed, members)
    assert list(step.update) == [members[0]["uuid"]]


def test_an_error_outside_the_roll_does_not_block_updating_it():
    s = a_set(replicas=2)
    members = members_of(s, ["ERROR", "ACTIVE"])
    s2 = {**s, "cores": 2}
    step = plan(s2, members)
    assert list(step.update) == [members[0]["uuid"]]
    assert step.update[members[0]["uuid"]][1]["cores"] == 2


# ---- the store step ----------------------------------------------------------------------

def play_daemon(server, set_uuid, status="ACTIVE", reason=None, only=None):
    nodes = server.store.collection("compute_nodes")
    for m in nodes.by("node_set", set_uuid):
        if only is None or m["name"] in only:
            nodes.update(m["uuid"], {"status": status, "status_reason": reason})


def members(admin, set_uuid):
    return sorted(admin.get(N, query={"node_set": set_uuid}).json, key=lambda m: m["name"])


@pytest.fixture
def settle(server):
    def run():
        reconcile_sets(server.store, server.settings)
        # a second pass over what the first wrote changes nothing
        assert reconcile_sets(server.store, server.settings) == 0
    return run


def test_members_through_the_api(admin, server, settle):
    s = created(admin.post(S, {**node_body(name="db"), "replicas": 2, "tags": ["x"]}))
    assert (s["status"], s["nodes"], s["set_type"]) == ("NEW", {}, "SET")
    settle()
    listed = members(admin, s["uuid"])
    assert [m["name"] for m in listed] == ["db-0", "db-1"]
    assert all(m["node_set"] == f"{S}/{s['uuid']}" and m["status"] == "NEW" for m in listed)
    key = admin.get(f"{N}/{listed[0]['uuid']}/actions/get_private_key").json
    assert admin.get(f"{S}/{s['uuid']}/actions/get_private_keys").json[listed[0]["uuid"]] \
        == key
    # members belong to the set: their shape is changed on the set
    assert "member of set" in refused(
        admin.put(f"{N}/{listed[0]['uuid']}", {"cores": 2}), 409)
    assert admin.put(f"{N}/{listed[0]['uuid']}", {"description": "primary"}).status == 200

    play_daemon(server, s["uuid"])
    settle()
    shown = admin.get(f"{S}/{s['uuid']}").json
    assert shown["status"] == "ACTIVE"
    assert {v["name"]: v["status"] for v in shown["nodes"].values()} == {
        "db-0": "ACTIVE", "db-1": "ACTIVE"}

    assert admin.put(f"{S}/{s['uuid']}", {"replicas": 4}).json["status"] == "IN_PROGRESS"
    settle()
    assert [m["name"] for m in members(admin, s["uuid"])] == ["db-0", "db-1", "db-2", "db-3"]
    admin.put(f"{S}/{s['uuid']}", {"replicas": 1})
    settle()
    assert [m["uuid"] for m in members(admin, s["uuid"])] == [listed[0]["uuid"]]

    image = {**s["disk_spec"], "image": IMAGE2}
    admin.put(f"{S}/{s['uuid']}", {"disk_spec": image, "replicas": 2})
    settle()
    play_daemon(server, s["uuid"], only={"db-1"})
    settle()
    play_daemon(server, s["uuid"], "ERROR", "boot failed", only={"db-0"})
    settle()
    shown = admin.get(f"{S}/{s['uuid']}").json
    assert (shown["status"], shown["status_reason"]) == ("ERROR", "db-0: boot failed")

    assert admin.delete(f"{S}/{s['uuid']}").status == 204
    assert members(admin, s["uuid"]) == []


def test_members_of_a_set_gone_are_removed(admin, server, settle):
    s = created(admin.post(S, {**node_body(name="gone"), "replicas": 1}))
    settle()
    # as if the set's delete had not reached its members (a crash in between)
    server.store.collection("compute_sets").delete(s["uuid"])
    assert len(members(admin, s["uuid"])) == 1
    settle()
    assert members(admin, s["uuid"]) == []


@pytest.mark.parametrize("field,good,bad", [
    ("replicas", (0, 4096), (-1, 4097)), ("cores", (1, 4096), (0, 4097)),
    ("ram", (512, 4194304), (511, 4194305))])
def test_set_ranges(admin, field, good, bad):
    for value in good:
        assert created(admin.post(S, {**node_body(), field: value}))[field] == value
    before = len(admin.get(S).json)
    for value in bad:
        assert field in refused(admin.post(S, {**node_body(), field: value}), 400)
    assert len(admin.get(S).json) == before


def test_set_rules(admin, member):
    assert "set_type" in refused(admin.post(S, {**node_body(), "set_type": "POOL"}), 400)
    s = created(admin.post(S, node_body()))
    hot = {**s["disk_spec"], "tier": "HOT"}
    assert "tier or ephemeral" in refused(admin.put(f"{S}/{s['uuid']}", {"disk_spec": hot}),
                                          400)
    for field in ("nodes", "status", "node_type", "network"):
        assert field in refused(admin.put(f"{S}/{s['uuid']}", {field: "HW"}), 403)
    refused(member.client.get(f"{S}/{s['uuid']}"), 404)
    assert "administrators" in refused(member.client.post(S, node_body(
        project_id=member.project, disk_spec={"kind": "root_disk",
                                              "image": "file:///x.qcow2"})), 403)


def test_members_that_go_leave_their_volumes_detached(admin, server, settle):
    s = created(admin.post(S, {**node_body(name="vols"), "replicas": 2}))
    settle()
    first, second = members(admin, s["uuid"])
    volumes = [created(admin.post("/v1/compute/volumes", {
        "project_id": ADMIN_PROJECT, "size": 1, "node": m["uuid"]})) for m in (first, second)]
    admin.put(f"{S}/{s['uuid']}", {"replicas": 1})
    settle()
    shown = [admin.get(f"/v1/compute/volumes/{v['uuid']}").json["node"] for v in volumes]
    assert shown == [f"{N}/{first['uuid']}", None]
    admin.delete(f"{S}/{s['uuid']}")
    assert admin.get(f"/v1/compute/volumes/{volumes[0]['uuid']}").json["node"] is None
