"""Hypervisors, placement policies and volumes through the API."""

import uuid

import pytest

from .conftest import ADMIN_PROJECT, H, N, P, V, Member, created, node_body, refused


def hyper(**fields):
    return {"name": "h", "driver_spec": {"kind": "libvirt",
                                         "connection_uri": f"test:///{uuid.uuid4().hex}"},
            **fields}


# ---- hypervisors ---------------------------------------------------------------------------

def test_hypervisor_defaults_and_read_only_capacity(admin):
    h = created(admin.post(H, hyper()))
    assert h["driver_spec"]["storage_pool"] == "default"
    assert h["driver_spec"]["machine_prefix"] == "vm-"
    assert (h["machine_type"], h["cores_ratio"], h["ram_ratio"]) == ("VM", 1.0, 1.0)
    assert h["status"] == "IN_PROGRESS" and "project_id" not in h
    assert "connection_uri" not in h
    for field in ("all_cores", "avail_ram", "all_disk", "accel", "accel_reason", "status"):
        assert field in refused(admin.put(f"{H}/{h['uuid']}", {field: 1}), 403)


def test_hypervisor_rules(admin):
    before = len(admin.get(H).json)
    cases = [
        (hyper(machine_type="HW"), "machine_type"),
        ({"driver_spec": {"kind": "libvirt"}}, "connection_uri: required"),
        ({"driver_spec": {"kind": "dummy", "connection_uri": "test:///x"}},
         "driver_spec.kind: must be one of libvirt, exordos_local_hyper"),
        (hyper(cores_ratio=0), "cores_ratio: must be at least 0.01"),
        (hyper(ram_ratio=-1.5), "ram_ratio"),
        (hyper(ram_ratio=1000.5), "ram_ratio: must be at most 1000"),
        ({"driver_spec": {"kind": "libvirt", "connection_uri": "x" * 2049}},
         "connection_uri: must be at most 2048"),
        ({"name": "h"}, "driver_spec: required"),
    ]
    for body, words in cases:
        assert words in refused(admin.post(H, body), 400), body
    for ratio in (0.01, 1000):
        created(admin.post(H, hyper(cores_ratio=ratio, ram_ratio=ratio)))
    assert len(admin.get(H).json) == before + 2


def test_a_connection_uri_is_registered_once(admin):
    first = created(admin.post(H, hyper()))
    uri = first["driver_spec"]["connection_uri"]
    refused(admin.post(H, hyper(driver_spec={"kind": "libvirt", "connection_uri": uri})), 409)
    second = created(admin.post(H, hyper()))
    refused(admin.put(f"{H}/{second['uuid']}",
                      {"driver_spec": {"kind": "libvirt", "connection_uri": uri}}), 409)
    moved = admin.put(f"{H}/{first['uuid']}",
                      {"driver_spec": {"kind": "libvirt", "connection_uri": uri + "-2"}})
    assert moved.status == 200 and moved.json["status"] == "IN_PROGRESS"
    # the old URI is free again
    created(admin.post(H, hyper(driver_spec={"kind": "libvirt", "connection_uri": uri})))


def test_a_hypervisor_running_nodes_is_not_deleted(admin, server):
    h = created(admin.post(H, hyper()))
    node = created(admin.post(N, node_body()))
    server.store.collection("compute_nodes").update(node["uuid"], {"hypervisor": h["uuid"]})
    assert "runs 1 node" in refused(admin.delete(f"{H}/{h['uuid']}"), 409)
    admin.delete(f"{N}/{node['uuid']}")
    assert admin.delete(f"{H}/{h['uuid']}").status == 204


def test_hypervisors_are_for_administrators_only(server, admin, member):
    h = created(admin.post(H, hyper()))
    # an owner holds compute.*.* in its project, and still gets none of the platform's
    for resp in (member.client.get(H), member.client.get(f"{H}/{h['uuid']}"),
                 member.client.post(H, hyper()),
                 member.client.put(f"{H}/{h['uuid']}", {"name": "x"}),
                 member.client.delete(f"{H}/{h['uuid']}")):
        refused(resp, 403)
    reader = Member(server, admin, role="reader")
    refused(reader.client.get(H), 403)
    assert admin.get(f"{H}/{h['uuid']}").json["name"] == "h"


def underlay(address, uri=None):
    return {"kind": "libvirt", "connection_uri": uri or f"test:///{uuid.uuid4().hex}",
            "underlay_address": address}


def test_underlay_address_is_a_hypervisors_own_unicast_address(admin, server):
    """The address every hypervisor floods a network's frames to: a project network's
    address there would hand one node every network's frames (appliance/tenancy/
    underlay.py); the attack is refused and nothing is written."""
    h = created(admin.post(H, hyper(driver_spec=underlay("198.51.100.1"))))
    assert h["driver_spec"]["underlay_address"] == "198.51.100.1"
    net = admin.post("/v1/network/networks", {"project_id": ADMIN_PROJECT,
                                              "cidr": "10.61.0.0/24"})
    assert net.status == 201, net
    before = len(admin.get(H).json)
    for address, words in (("10.61.0.30", "inside 10.61.0.0/24"),
                           ("127.0.0.1", "loopback"), ("169.254.1.1", "link-local"),
                           ("239.1.1.1", "multicast"), ("0.0.0.0", "unspecified"),
                           ("198.51.100.1/24", "not an IPv4 address"),
                           ("host.example", "not an IPv4 address")):
        assert words in refused(admin.post(H, hyper(driver_spec=underlay(address))), 400)
    # one hypervisor per address: two would take each other's tunnels
    assert "already has 198.51.100.1" in refused(
        admin.post(H, hyper(driver_spec=underlay("198.51.100.1"))), 409)
    assert "inside 10.61.0.0/24" in refused(admin.put(f"{H}/{h['uuid']}", {
        "driver_spec": underlay("10.61.0.30", h["driver_spec"]["connection_uri"])}), 400)
    assert len(admin.get(H).json) == before
    assert admin.get(f"{H}/{h['uuid']}").json["driver_spec"]["underlay_address"] == \
        "198.51.100.1"
    admin.delete(f"/v1/network/networks/{net.json['uuid']}")


def test_migration_address_is_a_hypervisors_own_unicast_address(admin, server):
    """Where the other hypervisors' QEMU send a moving node's memory and disks: an address
    inside a network of the nodes would hand that node another's memory; the underlay's
    rule (appliance/tenancy/underlay.py) refuses it and nothing is written."""
    net = admin.post("/v1/network/networks", {"project_id": ADMIN_PROJECT,
                                              "cidr": "10.62.0.0/24"})
    assert net.status == 201, net
    before = len(admin.get(H).json)

    def spec(address):
        return {"kind": "libvirt", "connection_uri": f"test:///{uuid.uuid4().hex}",
                "migration_address": address}
    for address, words in (("10.62.0.40", "inside 10.62.0.0/24"),
                           ("127.0.0.1", "loopback"), ("host.example", "not an IPv4")):
        message = refused(admin.post(H, hyper(driver_spec=spec(address))), 400)
        assert "driver_spec.migration_address" in message and words in message
    assert len(admin.get(H).json) == before
    h = created(admin.post(H, hyper(driver_spec=spec("198.51.100.9"))))
    assert h["driver_spec"]["migration_address"] == "198.51.100.9"
    admin.delete(f"{H}/{h['uuid']}")
    admin.delete(f"/v1/network/networks/{net.json['uuid']}")


def test_only_the_platform_sets_an_underlay_address(server):
    """The rule itself, for a caller the hypervisor policy would let through were it ever
    granted to a project: a project's principal is refused (403), a node agent's too."""
    from types import SimpleNamespace

    from appliance.tenancy import underlay as rule
    project = SimpleNamespace(project_id=str(uuid.uuid4()), node=None)
    agent = SimpleNamespace(project_id=None, node=str(uuid.uuid4()))
    for principal in (project, agent):
        status, message = rule.refusal(server.store, principal, "198.51.100.7")
        assert status == 403 and "only the platform" in message
    assert rule.refusal(server.store, None, "198.51.100.7") is None


# ---- placement policies ------------------------------------------------------------------

def test_policy_kinds(admin):
    assert created(admin.post(P, {"project_id": ADMIN_PROJECT}))["kind"] == \
        "soft-anti-affinity"
    for kind in ("hard-anti-affinity", "soft-affinity", "hard-affinity"):
        policy = created(admin.post(P, {"project_id": ADMIN_PROJECT, "kind": kind}))
        assert policy["kind"] == kind
    assert "kind" in refused(admin.post(P, {"project_id": ADMIN_PROJECT, "kind": "near"}),
                             400)
    assert "kind" in refused(admin.put(f"{P}/{policy['uuid']}", {"kind": "soft-affinity"}),
                             403)


@pytest.mark.parametrize("user", [N, "/v1/compute/sets"])
def test_a_policy_in_use_is_not_deleted(admin, user):
    policy = created(admin.post(P, {"project_id": ADMIN_PROJECT}))
    using = created(admin.post(user, {**node_body(), "placement_policies": [policy["uuid"]]}))
    assert "is used by" in refused(admin.delete(f"{P}/{policy['uuid']}"), 409)
    admin.delete(f"{user}/{using['uuid']}")
    assert admin.delete(f"{P}/{policy['uuid']}").status == 204


def test_policies_of_another_project_are_not_seen(member, other):
    theirs = created(other.client.post(P, {"project_id": other.project}))
    refused(member.client.get(f"{P}/{theirs['uuid']}"), 404)
    assert theirs["uuid"] not in {p["uuid"] for p in member.client.get(P).json}


# ---- volumes ---------------------------------------------------------------------------------

def volume(**fields):
    return {"project_id": ADMIN_PROJECT, "size": 1, **fields}


def test_volume_defaults_and_size_range(admin):
    v = created(admin.post(V, volume()))
    assert (v["boot"], v["tier"], v["ephemeral"], v["label"], v["image"], v["node"]) == (
        True, "WARM", True, None, None, None)
    assert v["status"] == "NEW" and v["device_type"] == ""
    assert created(admin.post(V, volume(size=1000000)))["size"] == 1000000
    before = len(admin.get(V).json)
    for size in (0, 1000001):
        assert "size" in refused(admin.post(V, volume(size=size)), 400)
    assert len(admin.get(V).json) == before


def test_volume_update_rules(admin):
    v = created(admin.post(V, volume(size=5, tier="HOT", ephemeral=False)))
    for field, value in (("tier", "COLD"), ("ephemeral", True), ("node", v["uuid"]),
                         ("hypervisor", v["uuid"])):
        assert field in refused(admin.put(f"{V}/{v['uuid']}", {field: value}), 403)
    assert "cannot shrink" in refused(admin.put(f"{V}/{v['uuid']}", {"size": 4}), 400)
    grown = admin.put(f"{V}/{v['uuid']}", {"size": 6, "label": "data"})
    assert grown.status == 200 and grown.json["status"] == "IN_PROGRESS"
    assert "http(s) URL" in refused(admin.put(f"{V}/{v['uuid']}", {"image": "gopher://x"}),
                                    400)


def test_attach_and_detach_as_the_reference(admin):
    node = created(admin.post(N, node_body()))
    v = created(admin.post(V, volume()))
    act = f"{V}/{v['uuid']}/actions"
    attached = admin.post(f"{act}/attach/invoke", {"node": f"{N}/{node['uuid']}"})
    assert attached.status == 200 and attached.json["node"] == f"{N}/{node['uuid']}"
    assert attached.json["status"] == "IN_PROGRESS"
    assert refused(admin.post(f"{act}/attach/invoke", {"node": node["uuid"]}), 400) == \
        "Volume is already attached to a node"
    assert "detach it first" in refused(admin.delete(f"{V}/{v['uuid']}"), 409)
    assert admin.post(f"{act}/detach/invoke", {}).json["node"] is None
    assert refused(admin.post(f"{act}/detach/invoke"), 400) == \
        "Volume is not attached to a node"
    assert admin.delete(f"{V}/{v['uuid']}").status == 204


@pytest.mark.parametrize("body,status", [
    ({}, 400), ({"node": 5}, 400), ({"node": "not-a-uuid"}, 400),
    ({"node": str(uuid.uuid4())}, 404), ({"node": "x", "extra": 1}, 400)])
def test_attach_refuses_bad_bodies(admin, body, status):
    v = created(admin.post(V, volume()))
    refused(admin.post(f"{V}/{v['uuid']}/actions/attach/invoke", body), status)
    assert admin.get(f"{V}/{v['uuid']}").json["node"] is None


def test_a_volume_goes_to_nodes_of_its_own_project_only(admin, member, other):
    theirs = created(other.client.post(N, node_body(project_id=other.project)))
    mine = created(member.client.post(V, volume(project_id=member.project)))
    act = f"{V}/{mine['uuid']}/actions/attach/invoke"
    refused(member.client.post(act, {"node": theirs["uuid"]}), 404)
    # an unscoped admin sees both, and still may not cross projects
    refused(admin.post(act, {"node": theirs["uuid"]}), 404)
    refused(member.client.post(V, volume(project_id=member.project, node=theirs["uuid"])),
            404)
    # a volume of another project is not there for the member
    their_volume = created(other.client.post(V, volume(project_id=other.project)))
    refused(member.client.get(f"{V}/{their_volume['uuid']}"), 404)
    refused(member.client.post(f"{V}/{their_volume['uuid']}/actions/detach/invoke"), 404)
    hw = created(admin.post(N, node_body(project_id=member.project, node_type="HW",
                                         disk_spec=None)))
    assert "HW node" in refused(member.client.post(act, {"node": hw["uuid"]}), 400)
    assert member.client.get(f"{V}/{mine['uuid']}").json["node"] is None


# ---- exordos_local_hyper: the reference CLI's `hypervisors init --add` -----------------------

def init_add_body(node, **spec):
    """The body the reference CLI's `hypervisors init --add` sends (reference-api.md §1.4:
    its `add` with the measured avail_cores/avail_ram and the local_hyper spec), with
    `storage_pool` a plain name although the reference server's type is a list."""
    return {"uuid": str(uuid.uuid4()), "name": "hv-host", "description": "",
            "driver_spec": {"kind": "exordos_local_hyper", "node": node,
                            "network": "exordos-core-net", "iface_mtu": 1500,
                            "network_type": "network", "storage_pool": "default",
                            "connection_uri": "test:///default",
                            "iface_rom_file": "/var/lib/exordos/rom/virtio-net.rom",
                            "machine_prefix": "vm-", **spec},
            "avail_cores": 8, "avail_ram": 15876}


def hw_node(admin, project=ADMIN_PROJECT):
    return created(admin.post(N, {"name": f"hw-{uuid.uuid4().hex[:8]}", "project_id": project,
                                  "cores": 1, "ram": 1024, "node_type": "HW"}))


def test_local_hyper_from_the_reference_init_add(admin):
    node = hw_node(admin)
    body = init_add_body(node["uuid"].upper())
    made = created(admin.post(H, body))
    assert made["uuid"] == body["uuid"] and made["status"] == "IN_PROGRESS"
    spec = made["driver_spec"]
    assert spec == {**body["driver_spec"], "node": node["uuid"]}
    # the measured capacity the CLI sends is accepted, and left to the daemon to write
    assert (made["avail_cores"], made["avail_ram"]) == (None, None)
    assert admin.get(f"{H}/{made['uuid']}").json == made
    # the reference's own type: a list of pools (one here)
    listed = created(admin.post(H, init_add_body(hw_node(admin)["uuid"], connection_uri=
                                                 f"test:///{uuid.uuid4().hex}", storage_pool=[
                                                     {"name": "fast", "tier": "ssd",
                                                      "ephemeral": False}])))
    assert listed["driver_spec"]["storage_pool"] == [{"name": "fast", "tier": "ssd",
                                                     "ephemeral": False}]
    # a second hypervisor on the same node: 409, as the reference (another URI)
    before = admin.get(H).json
    again = init_add_body(node["uuid"], connection_uri=f"test:///{uuid.uuid4().hex}")
    assert made["uuid"] in refused(admin.post(H, again), 409)
    refused(admin.put(f"{H}/{listed['uuid']}", {"driver_spec": {
        **listed["driver_spec"], "node": node["uuid"]}}), 409)
    assert admin.get(H).json == before
    # the CLI's measured capacity is not the admin's to change afterwards
    refused(admin.put(f"{H}/{made['uuid']}", {"avail_cores": 1}), 403)
    # deleted, its node is free again
    assert admin.delete(f"{H}/{made['uuid']}").status == 204
    created(admin.post(H, again))


def test_local_hyper_node_rules(admin, server, member):
    vm = created(admin.post(N, node_body()))
    projects_hw = hw_node(admin, member.project)
    unknown = str(uuid.uuid4())
    before = admin.get(H).json
    uri = {"connection_uri": f"test:///{uuid.uuid4().hex}"}
    cases = [
        (init_add_body(unknown, **uri), "not found in project"),
        # a project's machine never hosts the platform's VMs (appliance/tenancy/nodes.py)
        (init_add_body(projects_hw["uuid"], **uri), "not found in project"),
        (init_add_body(vm["uuid"], **uri), "is a VM"),
        ({"name": "h", "driver_spec": {"kind": "exordos_local_hyper", **uri}},
         "driver_spec.node: required"),
        (init_add_body("not-a-uuid", **uri), "driver_spec.node"),
        (hyper(driver_spec={"kind": "libvirt", "node": hw_node(admin)["uuid"], **uri}),
         "driver_spec.node: only for kind exordos_local_hyper"),
        (hyper(driver_spec={"kind": "libvirt", "storage_pool": [{"name": "x"}], **uri}),
         "storage_pool: a pool name"),
        (init_add_body(hw_node(admin)["uuid"], storage_pool=[{"name": "a"}, {"name": "b"}],
                       **uri), "storage_pool"),
        (init_add_body(hw_node(admin)["uuid"], storage_pool=[{"tier": "ssd"}], **uri),
         "storage_pool"),
        (init_add_body(hw_node(admin)["uuid"], avail_cores=-1, **uri), "avail_cores"),
    ]
    for body, words in cases:
        assert words in refused(admin.post(H, body), 400), body
    # a project's owner: hypervisors are the platform's, whatever the kind
    refused(member.client.post(H, init_add_body(projects_hw["uuid"], **uri)), 403)
    assert admin.get(H).json == before
