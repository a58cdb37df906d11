"""An instance's `client_networks` on the API (docs/sqldb.md, "Client networks"): checked
and normalized, null for the default (shown resolved in effective_client_networks), a
change IN_PROGRESS until the data plane applies it; and the sizes an instance placed on
given nodes may leave out."""

import pytest

from appliance.sqldb.versions import SEED_UUID
from tests.compute.conftest import Member, created
from tests.iam.helpers import ADMIN_PROJECT
from tests.lb.helpers import hw_node

from .helpers import INSTANCES, SIZES, make_instance, refused_unchanged


def path(instance):
    return f"{INSTANCES}/{instance['uuid']}"


@pytest.mark.parametrize("given,stored", [
    (["192.0.2.0/24"], ["192.0.2.0/24"]),
    (["192.0.2.7"], ["192.0.2.7/32"]),                  # an address: its /32
    (["192.0.2.7/24"], ["192.0.2.0/24"]),               # host bits cleared
    (["2001:DB8::/32", "2001:db8::1"], ["2001:db8::/32", "2001:db8::1/128"]),
    (["10.0.0.0/8", "10.0.0.0/8", "10.1.2.3/8"], ["10.0.0.0/8"]),   # once each
    (["0.0.0.0/0"], ["0.0.0.0/0"]),                     # open to all: the owner's choice
    ([], []),                                           # open to none
])
def test_client_networks_are_normalized(admin, given, stored):
    made = make_instance(admin, client_networks=given)
    assert made["client_networks"] == stored
    assert made["effective_client_networks"] == stored
    assert admin.get(path(made)).json["client_networks"] == stored


@pytest.mark.parametrize("bad", [
    "192.0.2.0/24\n", "192.0.2.0/24 ", " 192.0.2.0/24", "192.0.2.0/33", "192.0.2.256",
    "192.0.2.0/255.255.255.0", "fe80::1%eth0", "example.com", "", "10.0.0.0/8,10.1.0.0/16",
    "192.0.2.0/", 24, None, ["192.0.2.0/24"]])
def test_a_bad_entry_is_a_400_that_changes_nothing(server, admin, bad):
    message = refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES,
        "client_networks": ["192.0.2.0/24", bad]}), 400)
    assert "client_networks" in message
    made = make_instance(admin)
    refused_unchanged(server, lambda: admin.put(path(made), {
        "client_networks": [bad]}), 400)
    refused_unchanged(server, lambda: admin.put(path(made), {
        "client_networks": "192.0.2.0/24"}), 400)


def test_too_many_entries_are_refused(server, admin):
    many = [f"10.0.{i}.0/24" for i in range(65)]
    refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES,
        "client_networks": many}), 400)
    assert len(make_instance(admin, client_networks=many[:64])["client_networks"]) == 64


def test_the_default_is_the_projects_networks_the_members_and_the_setting(server, admin):
    member = Member(server, admin)
    network = created(admin.post("/v1/network/networks", {
        "name": "dbnet", "project_id": member.project}))
    address = network["cidr"].rsplit(".", 1)[0] + ".9"
    node = hw_node(member.client, project=member.project)
    assert member.client.put(f"/v1/compute/nodes/{node['uuid']}",
                             {"address": address}).status == 200
    made = make_instance(member.client, project=member.project, nodes_number=1,
                         placement={"kind": "nodes", "nodes": [node["uuid"]]})
    assert made["client_networks"] is None
    server.settings["sqldb_client_networks"] = "198.51.100.0/24, not-a-cidr"
    try:
        # the node's network is the project's own: listed once
        assert member.client.get(path(made)).json["effective_client_networks"] == [
            network["cidr"], "198.51.100.0/24"]
    finally:
        server.settings["sqldb_client_networks"] = ""


def test_a_change_is_in_progress_and_null_goes_back_to_the_default(server, admin):
    made = make_instance(admin, client_networks=["192.0.2.0/24"])
    server.store.collection("sqldb_instances").update(made["uuid"], {"status": "ACTIVE"})
    changed = admin.put(path(made), {"client_networks": ["192.0.2.0/24", "198.51.100.9"]})
    assert changed.status == 200, changed.json
    assert (changed.json["client_networks"], changed.json["status"]) == \
        (["192.0.2.0/24", "198.51.100.9/32"], "IN_PROGRESS")
    server.store.collection("sqldb_instances").update(made["uuid"], {"status": "ACTIVE"})
    # the same list again (as read back) changes nothing the data plane uses
    same = admin.put(path(made), {"client_networks": ["198.51.100.9/32", "192.0.2.0/24"][::-1]})
    assert same.json["status"] == "ACTIVE"
    back = admin.put(path(made), {"client_networks": None}).json
    assert back["client_networks"] is None and back["status"] == "IN_PROGRESS"
    assert back["effective_client_networks"] == []      # the admin project has no network


def test_a_project_may_open_its_instance_to_any_network(server, admin):
    """No tenant rule: pg_hba is the owner's allow-list for its own database; another
    project's network or the whole Internet only gets to try a password."""
    member, other = Member(server, admin), Member(server, admin)
    theirs = created(admin.post("/v1/network/networks", {
        "name": "theirs", "project_id": other.project}))
    made = make_instance(member.client, project=member.project,
                         client_networks=[theirs["cidr"], "0.0.0.0/0"])
    assert made["client_networks"] == [theirs["cidr"], "0.0.0.0/0"]


def test_sizes_are_optional_on_given_nodes_and_checked_when_given(server, admin):
    node = hw_node(admin)
    made = created(admin.post(INSTANCES, {
        "name": "on-hw", "project_id": ADMIN_PROJECT, "version": SEED_UUID,
        "placement": {"kind": "nodes", "nodes": [node["uuid"]]}}))
    assert (made["cpu"], made["ram"], made["disk_size"]) == (None, None, None)
    assert admin.put(path(made), {"ram": 2048}).json["ram"] == 2048
    assert admin.put(path(made), {"ram": None}).json["ram"] is None
    refused_unchanged(server, lambda: admin.put(path(made), {"cpu": 0}), 400)
    other = hw_node(admin)
    refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, "ram": 511,
        "placement": {"kind": "nodes", "nodes": [other["uuid"]]}}), 400)
    # on a node set of its own they size the machines: required
    for missing in ("cpu", "ram", "disk_size"):
        body = {"name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES}
        del body[missing]
        message = refused_unchanged(server, lambda: admin.post(INSTANCES, body), 400)
        assert missing in message and "placement" in message
    set_made = make_instance(admin)
    refused_unchanged(server, lambda: admin.put(path(set_made), {"cpu": None}), 400)


def test_what_was_read_may_be_put_back(server, admin):
    made = make_instance(admin, client_networks=["192.0.2.0/24"])
    read = admin.get(path(made)).json
    body = {k: v for k, v in read.items() if k not in ("uuid", "created_at", "updated_at")}
    assert admin.put(path(made), body).status == 200
    refused_unchanged(server, lambda: admin.put(path(made), {
        "effective_client_networks": ["0.0.0.0/0"]}), 403)
