"""DBaaS resources in manifests (`$dbaas.types.sqldb.*`, issue 16), against the real API
with the real builder daemon.

No data plane runs here: the instance, user and database statuses (and the instance's
`ipsv4` and `endpoint`) are written into the store by this test, as the sqldb plan daemon
would write them, to show how the element follows them. The real data plane (agents,
PostgreSQL, the plan daemon) installing this example to ACTIVE is the lead's end-to-end
test.
"""

import copy
import os

import pytest
import yaml

from appliance.em import links
from appliance.sqldb import scram
from appliance.sqldb.versions import SEED_UUID
from tests.secret.conftest import remember, wait_for

from .conftest import ADMIN_PROJECT, act, element, install, post_manifest, wait_element

P = ADMIN_PROJECT
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                       "pg-cluster-1.0.0.yaml")
INSTANCE = "types.sqldb.instances.$pg"
USER = "types.sqldb.instances.$pg.users.$app"
DATABASE = "types.sqldb.instances.$pg.databases.$appdb"
CONFIG = "config.configs.$client_env"
PASSWORD = "secret.passwords.$app_password"


def example(name="pg_cluster"):
    """The example, installed under another name when given (its links name it)."""
    with open(EXAMPLE) as f:
        text = f.read()
    return yaml.safe_load(text.replace("pg_cluster", name).replace(
        "pg-cluster", name.replace("_", "-")))


def owned(admin, elem, key):
    slot = elem["resources"][key]
    resp = admin.get(f"{slot['collection'].replace('<instance>', instance_of(elem))}/"
                     f"{slot['uuid']}")
    assert resp.status == 200, (key, resp)
    return resp.json


def instance_of(elem):
    return elem["resources"][INSTANCE]["uuid"]


def set_status(server, kind, uuid, status, **fields):
    """What the sqldb plan daemon writes (see the module docstring)."""
    server.store.collection(kind).update(uuid, {"status": status, **fields})


def revision(server, kind, uuid):
    return server.store.collection(kind).get(uuid)["revision"]


def edited(manifest, path, value):
    """A copy of the manifest with one value set (None: removed); path is a list of keys."""
    m = copy.deepcopy(manifest)
    target = m
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return m


# ---- planning: refused up front with a message that names the problem ----------------

RES = "resources"
INSTANCES = "$dbaas.types.sqldb.instances"
USERS = "$dbaas.types.sqldb.instances.$pg.users"
DATABASES = "$dbaas.types.sqldb.instances.$pg.databases"
BAD = [
    ("unknown collection under $dbaas",
     lambda m: edited(m, [RES, "$dbaas.types.sqldb.clusters"], {"x": {}}),
     ["$dbaas.types.sqldb.clusters", "unknown resource path", "types.sqldb.instances"]),
    ("unknown type under $dbaas",
     lambda m: edited(m, [RES, "$dbaas.types.mysql.instances"], {"x": {}}),
     ["$dbaas.types.mysql.instances", "unknown resource path"]),
    ("unknown sub-collection of an instance",
     lambda m: edited(m, [RES, "$dbaas.types.sqldb.instances.$pg.roles"], {"x": {}}),
     ["$dbaas.types.sqldb.instances.$pg.roles", "unknown resource path",
      "types.sqldb.instances.$<name>.users", "types.sqldb.instances.$<name>.databases"]),
    ("no such built-in element",
     lambda m: edited(m, [RES, "$dbaaz.types.sqldb.instances"], {"x": {}}),
     ["$dbaaz", "no built-in element"]),
    ("owner links a user the manifest does not have",
     lambda m: edited(m, [RES, DATABASES, "appdb", "owner"],
                      "$dbaas.types.sqldb.instances.$pg.users.$ghost:uuid"),
     ["appdb", "types.sqldb.instances.$pg.users.$ghost", "no such resource"]),
    ("link under the wrong built-in element",
     lambda m: edited(m, [RES, DATABASES, "appdb", "owner"],
                      "$core.types.sqldb.instances.$pg.users.$app:uuid"),
     ["owner", "declared under $dbaas, not $core"]),
    ("link that does not parse",
     lambda m: edited(m, [RES, DATABASES, "appdb", "owner"], "$dbaas.types.sqldb"),
     ["appdb.owner", "$dbaas.types.sqldb", "must end with a $name"]),
    ("instance linked to something else than its parent",
     lambda m: edited(m, [RES, USERS, "app", "instance"], "$core.secret.passwords."
                                                          "$app_password:uuid"),
     ["users.app.instance", "must link to the resource it is declared under"]),
    ("instance given as a literal uuid",
     lambda m: edited(m, [RES, USERS, "app", "instance"], SEED_UUID),
     ["users.app.instance", "must link"]),
    ("users of an instance the manifest does not have",
     lambda m: edited(m, [RES, "$dbaas.types.sqldb.instances.$nope.users"],
                      {"u": {"name": "u", "password": "password-1"}}),
     ["declared under types.sqldb.instances.$nope", "no such resource"]),
    ("unknown field of an instance",
     lambda m: edited(m, [RES, INSTANCES, "pg", "colour"], "red"),
     ["pg.colour", "unknown field"]),
    ("read-only field of an instance",
     lambda m: edited(m, [RES, INSTANCES, "pg", "ipsv4"], ["10.0.0.1"]),
     ["pg.ipsv4", "read-only"]),
    ("literal out of range (first refused)",
     lambda m: edited(m, [RES, INSTANCES, "pg", "nodes_number"], 17),
     ["pg", "nodes_number"]),
    ("import link without a resource name",
     lambda m: edited(m, ["imports", "pg15", "link"], "$dbaas.types.sqldb.versions"),
     ["imports.pg15.link", "must end with a $name"]),
    ("import of an undeclared name",
     lambda m: edited(m, [RES, INSTANCES, "pg", "version"], "$pg_cluster.imports.$pg99:uuid"),
     ["version", "no import pg99"]),
]


@pytest.mark.parametrize("why,change,words", BAD, ids=[b[0] for b in BAD])
def test_a_bad_dbaas_manifest_is_400_naming_the_problem(admin, why, change, words):
    before = admin.get("/v1/em/manifests").json
    resp = post_manifest(admin, change(example()))
    assert resp.status == 400, (why, resp)
    for word in words:
        assert word in resp.json["message"], (why, word, resp.json["message"])
    assert admin.get("/v1/em/manifests").json == before


def test_last_accepted_literal_is_planned(admin):
    """The boundary's other side: 16 nodes (the spec's last accepted) plans."""
    m = edited(example("pg_sixteen"), [RES, INSTANCES, "pg", "nodes_number"], 16)
    resp = post_manifest(admin, m)
    assert resp.status == 201, resp
    assert admin.delete(f"/v1/em/manifests/{resp.json['uuid']}").status == 204


def test_the_reference_spelling_plans_as_well(admin):
    """`$dbaas.types.postgres.*` (the reference's) is the same collection as `sqldb`."""
    text = yaml.safe_dump(example("pg_reference")).replace("types.sqldb.", "types.postgres.")
    resp = admin.post("/v1/em/manifests", raw=text.encode(), content_type="application/yaml")
    assert resp.status == 201, resp
    report = admin.get(f"/v1/em/manifests/{resp.json['uuid']}/actions/validate").json
    assert report["valid"], report
    order = [report["order"].index(key) for key in (
        "types.postgres.instances.$pg", "types.postgres.instances.$pg.users.$app",
        "types.postgres.instances.$pg.databases.$appdb", CONFIG)]
    assert order == sorted(order), report["order"]
    assert admin.delete(f"/v1/em/manifests/{resp.json['uuid']}").status == 204


# ---- install-time checks: requirements and imports against the built-in dbaas ---------

@pytest.mark.parametrize("requirement,ok", [
    ({"from_version": "2.1.0"}, True),          # the built-in's own version: met
    ({"to_version": "2.1.1"}, True),
    ({"from_version": "2.1.1"}, False),         # the first version past it: not met
    ({"version": "2.1.0"}, True),
])
def test_requirements_on_dbaas_meet_its_built_in_version(admin, requirement, ok):
    m = {"name": "needs_dbaas", "version": "1.0.0", "resources": {},
         "requirements": {"dbaas": requirement}}
    uuid = post_manifest(admin, m).json["uuid"]
    report = admin.get(f"/v1/em/manifests/{uuid}/actions/validate").json
    assert report["valid"] is ok, report
    if not ok:
        assert "dbaas" in report["errors"][0] and "2.1.0" in report["errors"][0]
    assert admin.delete(f"/v1/em/manifests/{uuid}").status == 204


def test_an_import_the_built_in_does_not_export_is_refused(admin):
    m = edited(example("pg_ghost_version"), ["imports", "pg15", "link"],
               "$dbaas.types.sqldb.versions.$pg99")
    uuid = post_manifest(admin, m).json["uuid"]
    resp = act(admin, uuid, "install")
    assert resp.status == 400 and "does not export $dbaas.types.sqldb.versions.$pg99" in \
        resp.json["message"], resp
    assert element(admin, "pg_ghost_version") is None


def test_a_manifest_named_after_a_built_in_is_not_installed(admin):
    uuid = post_manifest(admin, {"name": "dbaas", "version": "9.0.0", "resources": {}}).json[
        "uuid"]
    resp = act(admin, uuid, "install")
    assert resp.status == 409 and "built into this appliance" in resp.json["message"], resp


# ---- install, status, uninstall ----------------------------------------------------------

def test_install_follows_the_data_plane_to_active_and_uninstall_removes_everything(
        server, admin):
    manifest_uuid = install(admin, example())

    # the instance is made with the version the import names, then everything linking to
    # it waits while it is not ACTIVE
    elem = wait_for(lambda: (e := element(admin, "pg_cluster")) and
                    (e["resources"].get(INSTANCE) or {}).get("record_status") == "NEW" and e)
    assert elem["status"] == "IN_PROGRESS"
    assert INSTANCE in elem["status_reason"] and "NEW" in elem["status_reason"]
    instance = owned(admin, elem, INSTANCE)
    assert instance["version"] == f"/v1/types/sqldb/versions/{SEED_UUID}"
    assert (instance["nodes_number"], instance["sync_replica_number"]) == (3, 1)
    assert instance["project_id"] == P
    for key in (USER, DATABASE, CONFIG):
        assert elem["resources"][key]["status"] == "WAITING", (key, elem["resources"][key])
    assert admin.get(f"/v1/sqldb/instances/{instance['uuid']}/users").json == []

    # IN_PROGRESS (infrastructure made, database being installed): still waiting
    set_status(server, "sqldb_instances", instance["uuid"], "IN_PROGRESS")
    wait_for(lambda: element(admin, "pg_cluster")["resources"][INSTANCE].get(
        "record_status") == "IN_PROGRESS")
    assert element(admin, "pg_cluster")["status"] == "IN_PROGRESS"

    # ACTIVE: the user is made, with the secret's value kept only as a SCRAM verifier
    set_status(server, "sqldb_instances", instance["uuid"], "ACTIVE",
               ipsv4=["127.0.0.31", "127.0.0.32", "127.0.0.33"],
               endpoint=f"{instance['uuid']}.sqldb.appliance.internal")
    elem = wait_for(lambda: (e := element(admin, "pg_cluster")) and
                    e["resources"][USER].get("record_status") == "NEW" and e)
    password = remember(owned(admin, elem, PASSWORD)["value"])
    user = owned(admin, elem, USER)
    assert user["name"] == "app" and user["status"] == "NEW"
    assert user["instance"] == f"/v1/types/sqldb/instances/{instance['uuid']}"
    assert "password" not in user and "password_hash" not in user
    stored = server.store.collection("sqldb_users").get(user["uuid"])
    assert password not in repr(stored)
    assert stored["password_hash"].startswith("SCRAM-SHA-256$4096:")
    assert scram.verifies(password, stored["password_hash"])
    assert elem["resources"][DATABASE]["status"] == "WAITING"

    # the user ACTIVE: the database is made, owned by that user
    set_status(server, "sqldb_users", user["uuid"], "ACTIVE")
    elem = wait_for(lambda: (e := element(admin, "pg_cluster")) and
                    e["resources"][DATABASE].get("record_status") == "NEW" and e)
    database = owned(admin, elem, DATABASE)
    assert database["name"] == "appdb"
    assert database["owner"] == (f"/v1/types/sqldb/instances/{instance['uuid']}/users/"
                                 f"{user['uuid']}")
    assert server.store.collection("sqldb_databases").get(database["uuid"])["owner"] == \
        user["uuid"]
    assert elem["status"] == "IN_PROGRESS"

    # the database ACTIVE: the config is rendered (to_str(ipsv4), names, the password as a
    # link) and the element is ACTIVE
    set_status(server, "sqldb_databases", database["uuid"], "ACTIVE")
    elem = wait_element(admin, "pg_cluster")
    assert all(slot["status"] == "ACTIVE" for slot in elem["resources"].values())
    variables = owned(admin, elem, CONFIG)["body"]["variables"]
    assert variables["hosts"] == "127.0.0.31,127.0.0.32,127.0.0.33"
    assert variables["endpoint"] == f"{instance['uuid']}.sqldb.appliance.internal"
    assert (variables["database"], variables["user"]) == ("appdb", "app")
    assert variables["password"] == \
        f"$core.secret.passwords.${elem['resources'][PASSWORD]['uuid']}:value"
    views = admin.get("/v1/em/resources", query={"element": elem["uuid"]}).json
    kinds = {v["link"]: v["kind"] for v in views}
    assert kinds["$dbaas.types.sqldb.instances.$pg"] == "em_dbaas_types_sqldb_instances"
    assert kinds["$dbaas.types.sqldb.instances.$pg.users.$app"] == \
        "em_dbaas_types_sqldb_instances_users"
    assert kinds["$core.secret.passwords.$app_password"] == "em_core_secret_passwords"

    # a new address (the data plane replaced a member): the config follows, and the pass
    # that rewrote it left the instance and the database alone (their version and owner
    # read back as paths are the values the manifest gave as uuids: nothing to write)
    database_revision = revision(server, "sqldb_databases", database["uuid"])
    set_status(server, "sqldb_instances", instance["uuid"], "ACTIVE",
               ipsv4=["127.0.0.31", "127.0.0.32", "127.0.0.34"])
    instance_revision = revision(server, "sqldb_instances", instance["uuid"])
    wait_for(lambda: owned(admin, element(admin, "pg_cluster"), CONFIG)["body"]["variables"][
        "hosts"] == "127.0.0.31,127.0.0.32,127.0.0.34")
    assert revision(server, "sqldb_instances", instance["uuid"]) == instance_revision
    assert revision(server, "sqldb_databases", database["uuid"]) == database_revision

    # the data plane fails: the element is ERROR with the reason, and recovers with it
    set_status(server, "sqldb_instances", instance["uuid"], "ERROR",
               status_reason="node n1 lost")
    elem = wait_element(admin, "pg_cluster", "ERROR")
    assert INSTANCE in elem["status_reason"] and "node n1 lost" in elem["status_reason"]
    set_status(server, "sqldb_instances", instance["uuid"], "ACTIVE", status_reason=None)
    wait_element(admin, "pg_cluster")

    # a second install of the same name is refused, whatever its version
    again = post_manifest(admin, edited(example(), ["version"], "1.0.1")).json["uuid"]
    resp = act(admin, again, "install")
    assert resp.status == 409 and "already installed" in resp.json["message"], resp
    assert act(admin, manifest_uuid, "install").status == 409

    # uninstall: every record the element made is gone
    made = {key: (slot["collection"].replace("<instance>", instance["uuid"]), slot["uuid"])
            for key, slot in elem["resources"].items()}
    assert act(admin, manifest_uuid, "uninstall").status == 200
    wait_for(lambda: element(admin, "pg_cluster") is None)
    for key, (collection, uuid) in made.items():
        assert admin.get(f"{collection}/{uuid}").status == 404, key
    for kind in ("sqldb_instances", "sqldb_users", "sqldb_databases"):
        assert server.store.collection(kind).records() == [], kind


def test_a_user_needs_the_value_of_its_password_secret(server, admin):
    """A user whose password links a secret without a value waits (the link's reason is
    logged), like any other consumer; :value of a password, :uuid of an import."""
    m = {"name": "pg_waiting", "version": "1.0.0",
         "requirements": {"dbaas": {"from_version": "2.1.0"}},
         "imports": {"v": {"element": "$dbaas", "kind": "resource",
                           "link": "$dbaas.types.postgres.versions.$pg15"}},
         "resources": {
             "$core.secret.secrets": {"pw": {"name": "pg-waiting-pw", "project_id": P,
                                             "constructor": {"kind": "plain"}}},
             "$dbaas.types.postgres.instances": {"db": {
                 "name": "pg-waiting", "project_id": P, "cpu": 1, "ram": 512,
                 "disk_size": 8, "version": "$pg_waiting.imports.$v"}},
             "$dbaas.types.postgres.instances.$db.users": {"u": {
                 "name": "u1", "password": "$pg_waiting.secret.secrets.$pw:value"}}}}
    uuid = install(admin, m)
    elem = wait_for(lambda: (e := element(admin, "pg_waiting")) and
                    e["resources"].get("types.postgres.instances.$db") and e)
    instance = elem["resources"]["types.postgres.instances.$db"]["uuid"]
    got = admin.get(f"/v1/types/postgres/instances/{instance}").json
    assert got["version"] == f"/v1/types/postgres/versions/{SEED_UUID}"
    assert got["sync_replica_number"] == 0          # one node: the contract's default
    set_status(server, "sqldb_instances", instance, "ACTIVE")
    elem = wait_for(lambda: (e := element(admin, "pg_waiting")) and e["resources"][
        "types.postgres.instances.$db.users.$u"]["status"] == "WAITING" and "has no value" in
        e["resources"]["types.postgres.instances.$db.users.$u"]["reason"] and e)
    assert elem["status"] == "IN_PROGRESS"
    secret = elem["resources"]["secret.secrets.$pw"]["uuid"]
    value = remember("a-password-of-the-operator")
    assert admin.put(f"/v1/secret/secrets/{secret}", {"value": value}).status == 200
    elem = wait_for(lambda: (e := element(admin, "pg_waiting")) and e["resources"][
        "types.postgres.instances.$db.users.$u"].get("record_status") == "NEW" and e)
    user = server.store.collection("sqldb_users").get(
        elem["resources"]["types.postgres.instances.$db.users.$u"]["uuid"])
    assert scram.verifies(value, user["password_hash"])
    set_status(server, "sqldb_users", user["uuid"], "ACTIVE")
    wait_element(admin, "pg_waiting")
    assert act(admin, uuid, "uninstall").status == 200
    wait_for(lambda: element(admin, "pg_waiting") is None)
    assert server.store.collection("sqldb_instances").get(instance) is None


def test_links_parse_the_nested_dbaas_forms():
    link = links.parse_link("$x.types.sqldb.instances.$pg.users.$app:uuid")
    assert link.key == "types.sqldb.instances.$pg.users.$app" and link.fields == ("uuid",)
    call = links.parse_expression("to_str($x.types.sqldb.instances.$pg:ipsv4)")
    assert call.evaluate(lambda _: ["10.0.0.1", "10.0.0.2"]) == "10.0.0.1,10.0.0.2"
    assert call.evaluate(lambda _: []) == ""


def test_a_write_the_api_refuses_is_error_until_the_action_is_invoked_again(server, admin):
    """Not a data-plane ERROR: the cross-field rule (sync replicas <= nodes - 1) is the
    API's, so the element stays ERROR, and is not retried behind the caller's back."""
    m = edited(example("pg_refused"), [RES, INSTANCES, "pg", "sync_replica_number"], 3)
    uuid = install(admin, m)
    elem = wait_element(admin, "pg_refused", "ERROR")
    assert INSTANCE in elem["status_reason"] and "sync_replica_number" in \
        elem["status_reason"], elem
    assert "record_status" not in elem["resources"][INSTANCE]
    assert server.store.collection("sqldb_instances").find_one(name="pg-refused") is None
    # invoking install again is the retry: refused again, the same way
    assert act(admin, uuid, "install").status == 200
    wait_for(lambda: (e := element(admin, "pg_refused")) and e["status"] == "ERROR"
             and e["status_reason"] == elem["status_reason"])
    assert act(admin, uuid, "uninstall").status == 200
    wait_for(lambda: element(admin, "pg_refused") is None)
