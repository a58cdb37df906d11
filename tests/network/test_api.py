"""/v1/network/networks and /v1/network/ports through a real server: shapes, layout,
the cidr rules, the delete rule, read-only ports, project scoping, and each bad input as
a 4xx with the error body that changes nothing."""

import threading
import uuid

import pytest

from appliance.network import networks, ports
from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user

N = "/v1/network/networks"
P = "/v1/network/ports"
FIELDS = {"uuid", "name", "description", "project_id", "cidr", "routing", "gateway", "dns",
          "dhcp_start", "dhcp_end", "bridge", "default", "status", "status_reason",
          "vni", "home_hypervisor", "created_at", "updated_at"}


def create(admin, **fields):
    resp = admin.post(N, {"project_id": ADMIN_PROJECT, **fields})
    assert resp.status == 201, resp
    return resp.json


def error(resp, status):
    assert resp.status == status, resp
    body = resp.json
    assert set(body) == {"type", "code", "message"} and body["code"] == status
    return body["message"]


def state(admin):
    return sorted((n["uuid"], n["updated_at"]) for n in admin.get(N).json)


def test_create_with_a_cidr_shows_its_layout(admin):
    resp = admin.post(N, {"project_id": ADMIN_PROJECT, "name": "lab", "description": "d",
                          "cidr": "172.16.5.0/24"})
    assert resp.status == 201, resp
    net = resp.json
    assert set(net) == FIELDS
    assert resp.header("location") == f"{N}/{net['uuid']}"
    assert {k: net[k] for k in ("name", "description", "cidr", "routing", "gateway", "dns",
                                "dhcp_start", "dhcp_end", "default", "status",
                                "status_reason")} == {
        "name": "lab", "description": "d", "cidr": "172.16.5.0/24", "routing": "isolated",
        "gateway": "172.16.5.1", "dns": "172.16.5.2", "dhcp_start": "172.16.5.20",
        "dhcp_end": "172.16.5.254", "default": False, "status": "NEW", "status_reason": None}
    assert net["bridge"].startswith("ap-") and len(net["bridge"]) <= 15
    assert admin.get(f"{N}/{net['uuid']}").json == net
    assert admin.get(N, query={"cidr": "172.16.5.0/24"}).json == [net]


def test_without_a_cidr_the_next_free_24_of_the_pool(admin):
    first = create(admin, routing="nat")
    second = create(admin)
    assert first["routing"] == "nat"
    taken = {first["cidr"], second["cidr"]}
    assert len(taken) == 2 and all(c.startswith("10.3") and c.endswith(".0/24") for c in taken)


def test_concurrent_creates_never_overlap(admin):
    made = []

    def one():
        made.append(admin.post(N, {"project_id": ADMIN_PROJECT}))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status for r in made] == [201] * 8
    cidrs = [n["cidr"] for n in admin.get(N).json]
    assert len(cidrs) == len(set(cidrs))
    # the VXLAN ids are chosen under the same lock: one tunnel per network
    vnis = [n["vni"] for n in admin.get(N).json]
    assert len(vnis) == len(set(vnis)) and min(vnis) >= networks.FIRST_VNI


def test_overlapping_and_reserved_cidrs_are_409(admin):
    net = create(admin, cidr="172.16.8.0/24")
    before = state(admin)
    for cidr, words in [("172.16.8.0/24", "overlaps 172.16.8.0/24"),
                        ("172.16.8.128/25", "overlaps 172.16.8.0/24"),
                        ("172.16.0.0/16", "overlaps"),
                        ("10.20.2.0/24", "kept for the platform network")]:
        assert words in error(admin.post(N, {"project_id": ADMIN_PROJECT, "cidr": cidr}), 409)
    assert state(admin) == before
    assert admin.delete(f"{N}/{net['uuid']}").status == 204


@pytest.mark.parametrize("body, status, words", [
    ({"cidr": "8.8.8.0/24"}, 400, "not a private network"),
    ({"cidr": "10.50.0.0/30"}, 400, "too small"),
    ({"cidr": "10.50.0.1/24"}, 400, "the network is 10.50.0.0/24"),
    ({"cidr": "10.50.0.0"}, 400, "no prefix length"),
    ({"cidr": "10.500.0.0/24"}, 400, "not an IPv4 network"),
    ({"cidr": "a.b.c.d/24"}, 400, "not an IPv4 network"),
    ({"cidr": "fd00::/64"}, 400, "not an IPv4 network"),
    ({"cidr": " 10.50.0.0/24"}, 400, "cidr"),
    ({"cidr": 24}, 400, "cidr"),
    ({"cidr": ["10.50.0.0/24"]}, 400, "cidr"),
    ({"cidr": "10.50.0.0/24" * 3}, 400, "cidr"),
    ({"routing": "bridged"}, 400, "routing"),
    ({"routing": ""}, 400, "routing"),
    ({"routing": True}, 400, "routing"),
    ({"name": "x" * 256}, 400, "name"),
    ({"name": 5}, 400, "name"),
    ({"description": "x" * 256}, 400, "description"),
    ({"mtu": 1500}, 400, "unknown field"),
    ({"gateway": "10.50.0.1"}, 403, "gateway is read-only"),
    ({"bridge": "br0"}, 403, "bridge is read-only"),
    ({"default": True}, 403, "default is read-only"),
    ({"status": "ACTIVE"}, 403, "status is read-only"),
    ({"vni": 4096}, 403, "vni is read-only"),
    ({"home_hypervisor": str(uuid.UUID(int=9))}, 403, "home_hypervisor is read-only"),
    ({"default_of": ADMIN_PROJECT}, 400, "unknown field"),
    ({"project_id": "not-a-uuid"}, 400, "project_id"),
    ({"project_id": str(uuid.UUID(int=7))}, 400, "does not exist"),
])
def test_bad_create_is_refused_and_changes_nothing(admin, body, status, words):
    before = state(admin)
    assert words in error(admin.post(N, {"project_id": ADMIN_PROJECT, **body}), status)
    assert state(admin) == before


def test_body_that_is_not_an_object_is_400(admin):
    before = state(admin)
    error(admin.post(N, ["10.50.0.0/24"]), 400)
    error(admin.post(N, raw=b"{not json", content_type="application/json"), 400)
    assert state(admin) == before


def test_update_name_only_cidr_and_routing_are_fixed(admin):
    net = create(admin, cidr="172.16.9.0/24")
    path = f"{N}/{net['uuid']}"
    resp = admin.put(path, {"name": "renamed", "description": "new"})
    assert resp.status == 200 and resp.json["name"] == "renamed"
    assert resp.json["cidr"] == "172.16.9.0/24"
    before = admin.get(path).json
    assert "cidr is read-only" in error(admin.put(path, {"cidr": "172.16.10.0/24"}), 403)
    assert "routing is read-only" in error(admin.put(path, {"routing": "nat"}), 403)
    assert "read-only" in error(admin.put(path, {"gateway": "172.16.9.9"}), 403)
    error(admin.put(path, {"name": ["x"]}), 400)
    assert admin.get(path).json == before
    # what was read may be sent back whole
    assert admin.put(path, {k: v for k, v in before.items()
                            if k not in ("uuid", "created_at", "updated_at")}).status == 200
    assert admin.delete(path).status == 204


def test_network_with_ports_cannot_be_deleted(net_server, admin):
    net = create(admin, cidr="172.16.11.0/29")
    node = {"uuid": str(uuid.uuid4()), "project_id": ADMIN_PROJECT, "network": net["uuid"]}
    port = ports.allocate(net_server.store, net_server.settings, node)
    path = f"{N}/{net['uuid']}"
    assert "1 port(s)" in error(admin.delete(path), 409)
    assert admin.get(path).status == 200
    ports.release(net_server.store, node["uuid"])
    assert admin.get(f"{P}/{port['uuid']}").status == 404
    assert admin.delete(path).status == 204
    error(admin.delete(path), 404)


def test_ports_are_read_only(net_server, admin):
    node = {"uuid": str(uuid.uuid4()), "project_id": ADMIN_PROJECT, "network": None}
    port = ports.allocate(net_server.store, net_server.settings, node)
    path = f"{P}/{port['uuid']}"
    shown = admin.get(path).json
    assert shown == {
        "uuid": port["uuid"], "network": f"{N}/{port['network']}",
        "node": f"/v1/compute/nodes/{node['uuid']}", "project_id": ADMIN_PROJECT,
        "ipv4": port["ipv4"], "mask": "255.255.252.0", "mac": port["mac"], "status": "NEW",
        "created_at": port["created_at"], "updated_at": port["updated_at"]}
    # the default network of the admin project: the platform network
    default = admin.get(f"{N}/{port['network']}").json
    assert default["default"] is True and default["cidr"] == "10.20.0.0/22"
    for query in ({"network": port["network"]}, {"network": f"{N}/{port['network']}"},
                  {"node": node["uuid"]}, {"ipv4": port["ipv4"]}):
        assert admin.get(P, query=query).json == [shown]
    error(admin.get(P, query={"network": "nope"}), 400)
    error(admin.get(P, query={"colour": "red"}), 400)
    assert admin.post(P, {"ipv4": "10.20.0.99"}).status == 405
    assert admin.put(path, {"ipv4": "10.20.0.99"}).status == 405
    assert admin.delete(path).status == 405
    assert admin.get(path).json == shown
    ports.release(net_server.store, node["uuid"])


def test_projects_see_only_their_own(net_server, admin):
    project, other = make_project(admin), make_project(admin)
    user, username, password = make_user(admin)
    bind(admin, user, "owner", project)
    owner = net_server.client(net_server.login(username, password, f"project:{project}"))
    mine = owner.post(N, {})
    assert mine.status == 201, mine
    assert mine.json["project_id"] == project
    theirs = create(admin, project_id=other)
    their_port = ports.allocate(net_server.store, net_server.settings, {
        "uuid": str(uuid.uuid4()), "project_id": other, "network": theirs["uuid"]})
    assert [n["uuid"] for n in owner.get(N).json] == [mine.json["uuid"]]
    assert owner.get(P).json == []
    before = state(admin)
    for resp in (owner.get(f"{N}/{theirs['uuid']}"), owner.put(f"{N}/{theirs['uuid']}",
                                                               {"name": "mine"}),
                 owner.delete(f"{N}/{theirs['uuid']}"),
                 owner.get(f"{P}/{their_port['uuid']}")):
        error(resp, 404)
    error(owner.post(N, {"project_id": other}), 403)
    error(owner.get(N, query={"project_id": other}), 403)
    # the VXLAN id says which tunnel a network's frames ride: a project taking another's
    # would join its network on every hypervisor; it is the platform's to give
    assert theirs["vni"] != mine.json["vni"]
    assert "vni is read-only" in error(owner.put(f"{N}/{mine.json['uuid']}",
                                                 {"vni": theirs["vni"]}), 403)
    assert "vni is read-only" in error(owner.post(N, {"vni": theirs["vni"]}), 403)
    assert state(admin) == before
    assert owner.get(f"{N}/{mine.json['uuid']}").json["vni"] == mine.json["vni"]
    # a reader may look, not create
    reader_uuid, reader, reader_password = make_user(admin)
    bind(admin, reader_uuid, "reader", project)
    reader_client = net_server.client(net_server.login(reader, reader_password,
                                                       f"project:{project}"))
    assert [n["uuid"] for n in reader_client.get(N).json] == [mine.json["uuid"]]
    error(reader_client.post(N, {}), 403)
    ports.release(net_server.store, their_port["node"])


def test_no_token_is_401(net_server):
    assert net_server.client().get(N).status == 401
    assert net_server.client().get(P).status == 401


def test_the_store_keeps_one_default_network_per_project(net_server):
    coll = networks.networks(net_server.store)
    project = str(uuid.uuid4())
    made = networks.default_of_project(net_server.store, net_server.settings, project)
    assert networks.default_of_project(net_server.store, net_server.settings,
                                       project) == made
    # even a writer that skips the cidr lock cannot add a second one
    with pytest.raises(networks.DuplicateKey):
        coll.insert({**{k: v for k, v in made.items() if k not in ("uuid",)},
                     "bridge": "ap-other", "cidr": "10.99.0.0/24"})
