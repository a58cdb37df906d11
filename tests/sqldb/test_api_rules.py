"""Every rule of spec 2.9 and 8 on the DBaaS API, each as a boundary: the last value
accepted and the first refused, the refusal a clean 4xx that changes nothing."""

import uuid

import pytest

from appliance.sqldb.versions import SEED_UUID
from tests.compute.conftest import Member, created, refused
from tests.iam.helpers import ADMIN_PROJECT
from tests.lb.helpers import hw_node

from .helpers import (INSTANCES, SIZES, VERSIONS, databases, make_instance, make_user,
                      refused_unchanged, users)


@pytest.fixture(scope="module")
def instance(admin):
    return make_instance(admin, nodes_number=3)


@pytest.fixture(scope="module")
def user(admin, instance):
    return make_user(admin, instance)


# ---- sizes ------------------------------------------------------------------------------

@pytest.mark.parametrize("field,low,high", [
    ("cpu", 1, 128), ("ram", 512, 1048576), ("disk_size", 8, 1024),
    ("nodes_number", 1, 16)])
def test_size_ranges_on_create(server, admin, field, low, high):
    for good in (low, high):
        body = {field: good}
        if field == "nodes_number":
            body["sync_replica_number"] = 0
        assert make_instance(admin, **body)[field] == good
    for bad in (low - 1, high + 1):
        message = refused_unchanged(server, lambda: admin.post(INSTANCES, {
            "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID,
            **SIZES, field: bad}), 400)
        assert field in message


@pytest.mark.parametrize("field,low,high", [
    ("cpu", 1, 128), ("ram", 512, 1048576), ("nodes_number", 1, 16)])
def test_size_ranges_on_update(server, admin, field, low, high):
    made = make_instance(admin, sync_replica_number=0)
    for good in (high, low):
        assert admin.put(f"{INSTANCES}/{made['uuid']}", {field: good}).json[field] == good
    for bad in (low - 1, high + 1):
        refused_unchanged(server, lambda: admin.put(f"{INSTANCES}/{made['uuid']}",
                                                    {field: bad}), 400)


def test_disk_grows_up_to_one_terabyte_and_never_shrinks(server, admin):
    made = make_instance(admin, disk_size=10)
    path = f"{INSTANCES}/{made['uuid']}"
    assert admin.put(path, {"disk_size": 10}).status == 200      # the same size: no shrink
    message = refused_unchanged(server, lambda: admin.put(path, {"disk_size": 9}), 400)
    assert "shrink" in message
    assert admin.put(path, {"disk_size": 1024}).json["disk_size"] == 1024
    refused_unchanged(server, lambda: admin.put(path, {"disk_size": 1025}), 400)


def test_sync_replicas_at_most_nodes_minus_one(server, admin):
    assert make_instance(admin, nodes_number=16, sync_replica_number=15)[
        "sync_replica_number"] == 15
    assert make_instance(admin, nodes_number=3, sync_replica_number=2)[
        "sync_replica_number"] == 2
    message = refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES,
        "nodes_number": 3, "sync_replica_number": 3}), 400)
    assert "sync_replica_number" in message
    refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES,
        "nodes_number": 16, "sync_replica_number": 16}), 400)
    assert make_instance(admin, nodes_number=1, sync_replica_number=0)[
        "sync_replica_number"] == 0
    refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES,
        "sync_replica_number": -1}), 400)


def test_sync_replica_default_is_one_lowered_for_one_node(admin):
    assert make_instance(admin)["sync_replica_number"] == 0
    assert make_instance(admin, nodes_number=2)["sync_replica_number"] == 1
    assert make_instance(admin, nodes_number=5)["sync_replica_number"] == 1


def test_sync_replicas_checked_against_nodes_on_update(server, admin):
    made = make_instance(admin, nodes_number=3, sync_replica_number=2)
    path = f"{INSTANCES}/{made['uuid']}"
    refused_unchanged(server, lambda: admin.put(path, {"nodes_number": 2}), 400)
    shrunk = admin.put(path, {"nodes_number": 2, "sync_replica_number": 1})
    assert shrunk.status == 200 and shrunk.json["nodes_number"] == 2


# ---- version ----------------------------------------------------------------------------

def test_version_accepts_every_path_form_and_shows_the_family_form(admin):
    for form in (SEED_UUID, f"/v1/types/sqldb/versions/{SEED_UUID}",
                 f"/v1/types/postgres/versions/{SEED_UUID}"):
        made = make_instance(admin, version=form)
        assert made["version"] == f"/v1/types/sqldb/versions/{SEED_UUID}"
    got = admin.get(f"/api/dbaas/v1/types/postgres/instances/{made['uuid']}").json
    assert got["version"] == f"/v1/types/postgres/versions/{SEED_UUID}"


def test_version_is_read_only(server, admin, instance):
    path = f"{INSTANCES}/{instance['uuid']}"
    other = created(admin.post(VERSIONS, {"name": f"v-{uuid.uuid4().hex[:6]}", "major": 16}))
    message = refused_unchanged(server, lambda: admin.put(path, {"version": other["uuid"]}),
                                400)
    assert "version" in message
    # what was read may be sent back
    assert admin.put(path, {"version": instance["version"]}).status == 200


def test_unknown_version_is_refused(server, admin):
    refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, **SIZES,
        "version": str(uuid.uuid4())}), 400)
    refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, **SIZES, "version": "15"}), 400)


def test_deprecated_version_kept_by_existing_refused_for_new(server, admin):
    version = created(admin.post(VERSIONS, {"name": f"v-{uuid.uuid4().hex[:6]}",
                                            "major": 15}))
    existing = make_instance(admin, version=version["uuid"])
    assert admin.put(f"{VERSIONS}/{version['uuid']}", {"deprecated": True}).status == 200
    message = refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, **SIZES, "version": version["uuid"]}), 400)
    assert "deprecated" in message
    kept = admin.put(f"{INSTANCES}/{existing['uuid']}", {"cpu": 2})
    assert kept.status == 200 and kept.json["version"].endswith(version["uuid"])
    # in use: it cannot go
    refused_unchanged(server, lambda: admin.delete(f"{VERSIONS}/{version['uuid']}"), 409)


# ---- database names ---------------------------------------------------------------------

def test_database_name_is_an_sql_identifier(server, admin, instance, user):
    for good in ("d" * 63, "_x", "A1_b", "postgres2", "template"):
        created(admin.post(databases(instance), {"name": good, "owner": user["uuid"]}))
    for bad in ("d" * 64, "1abc", "a-b", "a$b", "a b", "é", "", "postgres", "template0",
                "Template1"):
        refused_unchanged(server, lambda: admin.post(databases(instance), {
            "name": bad, "owner": user["uuid"]}), 400)


def test_database_name_is_unique_within_an_instance(server, admin, instance, user):
    created(admin.post(databases(instance), {"name": "shop", "owner": user["uuid"]}))
    refused_unchanged(server, lambda: admin.post(databases(instance), {
        "name": "shop", "owner": user["uuid"]}), 409)
    other = make_instance(admin)
    other_user = make_user(admin, other)
    created(admin.post(databases(other), {"name": "shop", "owner": other_user["uuid"]}))


# ---- user names and passwords -----------------------------------------------------------

def test_user_name_follows_the_role_rules(server, admin, instance):
    for good in ("u" * 63, "_u", "a$b", "pgx", "postgres1", "dbaasx", "x_pg_", "publicx"):
        make_user(admin, instance, name=good)
    # reserved names are refused in any case: the node quotes names, and "Pg_x" beside
    # "pg_x" would only confuse
    for bad in ("u" * 64, "1u", "a-b", "pg_x", "Pg_x", "dbaas_x", "DBAAS_x", "postgres",
                "Postgres", "a b", "", "$a", "public", "None"):
        refused_unchanged(server, lambda: admin.post(users(instance), {
            "name": bad, "password": "password-1"}), 400)


def test_user_name_is_unique_within_an_instance(server, admin, instance):
    make_user(admin, instance, name="alice")
    refused_unchanged(server, lambda: admin.post(users(instance), {
        "name": "alice", "password": "password-1"}), 409)
    make_user(admin, make_instance(admin), name="alice")


def test_password_is_8_to_99_characters(server, admin, instance):
    for good in ("p" * 8, "p" * 99):
        made = make_user(admin, instance, password=good)
    for bad in ("p" * 7, "p" * 100):
        refused_unchanged(server, lambda: admin.post(users(instance), {
            "name": "someone", "password": bad}), 400)
        refused_unchanged(server, lambda: admin.put(f"{users(instance)}/{made['uuid']}", {
            "password": bad}), 400)
    refused_unchanged(server, lambda: admin.post(users(instance), {"name": "nopass"}), 400)
    refused_unchanged(server, lambda: admin.post(users(instance), {
        "name": "nul", "password": "pass\x00word"}), 400)


def test_user_name_is_read_only(server, admin, instance):
    made = make_user(admin, instance)
    refused_unchanged(server, lambda: admin.put(f"{users(instance)}/{made['uuid']}", {
        "name": "renamed"}), 403)


# ---- owners -----------------------------------------------------------------------------

def test_owner_is_a_user_of_the_same_instance(server, admin, instance, user):
    other = make_instance(admin)
    stranger = make_user(admin, other)
    for owner in (stranger["uuid"], f"/v1/types/sqldb/instances/{other['uuid']}/users/"
                  f"{stranger['uuid']}", str(uuid.uuid4()), "nobody",
                  f"/v1/types/sqldb/instances/{other['uuid']}/users/{user['uuid']}"):
        refused_unchanged(server, lambda: admin.post(databases(instance), {
            "name": "owned", "owner": owner}), 400)
    for form in (user["uuid"], f"/v1/types/postgres/instances/{instance['uuid']}/users/"
                 f"{user['uuid']}", f"/v1/sqldb/instances/{instance['uuid']}/users/"
                 f"{user['uuid']}"):
        db = created(admin.post(databases(instance), {
            "name": f"d_{uuid.uuid4().hex[:6]}", "owner": form}))
        assert db["owner"] == f"/v1/types/sqldb/instances/{instance['uuid']}/users/" \
                              f"{user['uuid']}"
    refused_unchanged(server, lambda: admin.put(f"{databases(instance)}/{db['uuid']}", {
        "owner": stranger["uuid"]}), 400)


def test_a_user_owning_a_database_cannot_go(server, admin, instance):
    owner = make_user(admin, instance)
    db = created(admin.post(databases(instance), {"name": "kept", "owner": owner["uuid"]}))
    message = refused_unchanged(server, lambda: admin.delete(
        f"{users(instance)}/{owner['uuid']}"), 409)
    assert "kept" in message
    assert admin.delete(f"{databases(instance)}/{db['uuid']}").status == 204
    assert admin.delete(f"{users(instance)}/{owner['uuid']}").status == 204


# ---- placement --------------------------------------------------------------------------

def test_placement_defaults_to_a_node_set(admin):
    assert make_instance(admin)["placement"] == {"kind": "node_set"}


def test_placement_on_nodes_needs_exactly_nodes_number_of_the_project(server, admin):
    a, b = hw_node(admin), hw_node(admin)
    member = Member(server, admin)
    foreign = hw_node(admin, project=member.project)
    made = make_instance(admin, nodes_number=2, placement={
        "kind": "nodes", "nodes": [a["uuid"], f"/v1/compute/nodes/{b['uuid']}"]})
    assert made["placement"] == {"kind": "nodes", "nodes": [a["uuid"], b["uuid"]]}
    for nodes in ([a["uuid"]], [a["uuid"], b["uuid"], foreign["uuid"]],
                  [a["uuid"], a["uuid"]], [a["uuid"], foreign["uuid"]],
                  [a["uuid"], str(uuid.uuid4())], [a["uuid"], "not-a-uuid"]):
        refused_unchanged(server, lambda: admin.post(INSTANCES, {
            "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES,
            "nodes_number": 2, "placement": {"kind": "nodes", "nodes": nodes}}), 400)
    path = f"{INSTANCES}/{made['uuid']}"
    refused_unchanged(server, lambda: admin.put(path, {"nodes_number": 3}), 400)
    refused_unchanged(server, lambda: admin.put(path, {"placement": {"kind": "node_set"}}),
                      403)
    assert admin.put(path, {"cpu": 4}).status == 200


# ---- status flows (3.4) -----------------------------------------------------------------

def test_create_is_new_and_a_data_plane_change_in_progress(server, admin):
    made = make_instance(admin)
    assert (made["status"], made["ipsv4"], made["endpoint"], made["primary"],
            made["epoch"], made["node_status"]) == ("NEW", [], None, None, 0, {})
    path = f"{INSTANCES}/{made['uuid']}"
    server.store.collection("sqldb_instances").update(made["uuid"], {"status": "ACTIVE"})
    assert admin.put(path, {"description": "only words"}).json["status"] == "ACTIVE"
    assert admin.put(path, {"cpu": 1}).json["status"] == "ACTIVE"      # not a change
    assert admin.put(path, {"ram": 1024}).json["status"] == "IN_PROGRESS"
    refused_unchanged(server, lambda: admin.put(path, {"status": "ACTIVE"}), 403)


def test_user_and_database_start_new_and_a_new_password_is_new_again(server, admin,
                                                                     instance):
    made = make_user(admin, instance)
    assert made["status"] == "NEW"
    path = f"{users(instance)}/{made['uuid']}"
    server.store.collection("sqldb_users").update(made["uuid"], {"status": "ACTIVE"})
    assert admin.put(path, {"description": "d"}).json["status"] == "ACTIVE"
    assert admin.put(path, {"password": "password-1"}).json["status"] == "ACTIVE"  # same
    assert admin.put(path, {"password": "password-2"}).json["status"] == "NEW"
    db = created(admin.post(databases(instance), {"name": "fresh", "owner": made["uuid"]}))
    assert db["status"] == "NEW"


def test_delete_takes_users_and_databases(server, admin):
    made = make_instance(admin)
    owner = make_user(admin, made)
    created(admin.post(databases(made), {"name": "gone", "owner": owner["uuid"]}))
    assert admin.delete(f"{INSTANCES}/{made['uuid']}").status == 204
    for kind in ("sqldb_users", "sqldb_databases"):
        assert server.store.collection(kind).by("instance", made["uuid"]) == []
    refused(admin.delete(f"{INSTANCES}/{made['uuid']}"), 404)
    refused(admin.get(f"{users(made)}/{owner['uuid']}"), 404)


def test_sealed_passwords_are_stored_and_never_shown(server, admin):
    made = make_instance(admin)
    record = server.store.collection("sqldb_instances").get(made["uuid"])
    assert record["replication_password"] and record["admin_password"]
    assert "replication_password" not in made and "admin_password" not in made
    refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "x", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES,
        "admin_password": "mine"}), 400)


# ---- projects and policies --------------------------------------------------------------

def test_a_project_owner_works_in_its_project_only(server, admin, instance):
    member = Member(server, admin)
    mine = make_instance(member.client, project=member.project)
    assert [r["uuid"] for r in member.client.get(INSTANCES).json] == [mine["uuid"]]
    refused(member.client.get(f"{INSTANCES}/{instance['uuid']}"), 404)
    refused(member.client.post(users(instance), {"name": "x", "password": "password-1"}),
            404)
    refused(member.client.post(INSTANCES, {"name": "x", "project_id": ADMIN_PROJECT,
                                           "version": SEED_UUID, **SIZES}), 403)
    owner = make_user(member.client, mine)
    refused(member.client.post(users(mine), {"name": "y", "password": "password-1",
                                             "project_id": ADMIN_PROJECT}), 403)
    refused(admin.post(users(mine), {"name": "y", "password": "password-1",
                                     "project_id": ADMIN_PROJECT}), 400)
    db = created(member.client.post(databases(mine), {"name": "m", "owner": owner["uuid"]}))
    assert db["project_id"] == member.project


def test_versions_are_read_by_all_and_written_by_the_admin_only(server, admin):
    member = Member(server, admin)
    listed = member.client.get(VERSIONS)
    assert listed.status == 200 and SEED_UUID in [v["uuid"] for v in listed.json["versions"]]
    assert member.client.get(f"{VERSIONS}/{SEED_UUID}").json["major"] == 15
    refused_unchanged(server, lambda: member.client.post(VERSIONS, {"name": "99",
                                                                    "major": 99}), 403)
    refused_unchanged(server, lambda: member.client.put(f"{VERSIONS}/{SEED_UUID}", {
        "deprecated": True}), 403)
    refused_unchanged(server, lambda: member.client.delete(f"{VERSIONS}/{SEED_UUID}"), 403)


def test_version_fields(server, admin):
    for bad in ({"name": "v", "major": 9}, {"name": "v", "major": 100}, {"name": "v"},
                {"name": "v", "major": 15, "image": "x" * 2049}):
        refused_unchanged(server, lambda: admin.post(VERSIONS, bad), 400)
    made = created(admin.post(VERSIONS, {"name": f"v-{uuid.uuid4().hex[:6]}", "major": 99,
                                         "image": "x" * 2048}))
    assert made["deprecated"] is False
    refused_unchanged(server, lambda: admin.post(VERSIONS, {"name": made["name"],
                                                            "major": 15}), 409)
    refused_unchanged(server, lambda: admin.put(f"{VERSIONS}/{made['uuid']}", {
        "major": 16}), 403)
    assert admin.delete(f"{VERSIONS}/{made['uuid']}").status == 204


def test_filters_take_uuids_and_paths(admin, instance, user):
    db = created(admin.post(databases(instance), {"name": "filtered", "owner": user["uuid"]}))
    for owner in (user["uuid"], f"/v1/types/sqldb/instances/{instance['uuid']}/users/"
                  f"{user['uuid']}"):
        listed = admin.get(databases(instance), query={"owner": owner})
        assert db["uuid"] in [d["uuid"] for d in listed.json], listed
    refused(admin.get(databases(instance), query={"owner": "alice"}), 400)
    for version in (SEED_UUID, f"/v1/types/postgres/versions/{SEED_UUID}"):
        listed = admin.get(INSTANCES, query={"version": version})
        assert instance["uuid"] in [i["uuid"] for i in listed.json]


def test_names_are_not_empty(server, admin):
    refused_unchanged(server, lambda: admin.post(INSTANCES, {
        "name": "", "project_id": ADMIN_PROJECT, "version": SEED_UUID, **SIZES}), 400)
    refused_unchanged(server, lambda: admin.post(VERSIONS, {"name": "", "major": 15}), 400)


def test_paging_of_the_wrapped_versions_list(admin):
    for _ in range(2):
        created(admin.post(VERSIONS, {"name": f"p-{uuid.uuid4().hex[:6]}", "major": 15}))
    first = admin.get(VERSIONS, query={"page_limit": 1})
    assert len(first.json["versions"]) == 1 and first.header("x-pagination-marker")
    second = admin.get(VERSIONS, query={"page_limit": 1,
                                        "page_marker": first.header("x-pagination-marker")})
    assert second.json["versions"][0]["uuid"] != first.json["versions"][0]["uuid"]
    assert admin.get("/v1/types/postgres/versions", query={"page_limit": 1}).json == \
        first.json["versions"]
