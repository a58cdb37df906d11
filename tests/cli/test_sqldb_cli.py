"""`appliance sqldb ...` against the real API."""

from __future__ import annotations

import threading
import time
import uuid

from appliance.sqldb import scram
from appliance.sqldb.versions import SEED_UUID

from tests.secret.conftest import remember

from .conftest import ADMIN_PROJECT

INSTANCES = "/v1/sqldb/instances/"


def ok(result):
    assert result.code == 0, result.stderr
    return result.json()


def make_instance(cli, name, *extra):
    return ok(cli("--json", "sqldb", "instances", "add", "-n", name, "-p", ADMIN_PROJECT,
                  "-v", "15", "--cpu", "1", "--ram", "512", "--disk-size", "8", *extra))


def test_an_instance_with_a_user_and_a_database_by_names(logged_in, real_api):
    name = f"shop-{uuid.uuid4().hex[:6]}"
    made = make_instance(logged_in, name, "--nodes-number", "3")
    assert logged_in.transport.to(INSTANCES)[-1].body == {
        "name": name, "project_id": ADMIN_PROJECT, "version": SEED_UUID, "cpu": 1,
        "ram": 512, "disk_size": 8, "nodes_number": 3}
    assert (made["status"], made["sync_replica_number"]) == ("NEW", 1)
    listed = logged_in("sqldb", "instances", "list")
    assert listed.code == 0 and made["uuid"] in listed.stdout
    grown = ok(logged_in("--json", "sqldb", "instances", "update", name, "--ram", "1024"))
    assert (grown["ram"], grown["status"]) == (1024, "IN_PROGRESS")

    user = ok(logged_in("--json", "sqldb", "users", "add", name, "-n", "alice",
                        "--password", remember("first-password")))
    assert user["status"] == "NEW" and "password" not in user
    db = ok(logged_in("--json", "sqldb", "databases", "add", name, "-n", "orders",
                      "--owner", "alice"))
    assert db["owner"] == f"/v1/types/sqldb/instances/{made['uuid']}/users/{user['uuid']}"
    shown = ok(logged_in("--json", "sqldb", "databases", "show", name, "orders"))
    assert shown["uuid"] == db["uuid"]
    assert [u["name"] for u in ok(logged_in("--json", "sqldb", "users", "list", name))] == \
        ["alice"]

    # the owner cannot go before its database; then both go
    refused = logged_in("sqldb", "users", "delete", name, "alice")
    assert refused.code != 0 and "orders" in refused.stderr
    assert logged_in("sqldb", "databases", "delete", name, "orders").code == 0
    assert logged_in("sqldb", "users", "delete", name, "alice").code == 0
    assert logged_in("sqldb", "instances", "delete", name).code == 0
    assert logged_in("sqldb", "instances", "show", name).code != 0


def test_a_password_is_prompted_twice_and_never_echoed(logged_in, real_api):
    name = f"p-{uuid.uuid4().hex[:6]}"
    made = make_instance(logged_in, name)
    logged_in.typed_password = remember("typed-password-1")
    result = logged_in("--json", "sqldb", "users", "add", name, "-n", "bob", tty=True)
    user = ok(result)
    assert logged_in.prompts[-2:] == ["Password: ", "Password again: "]
    assert "typed-password-1" not in result.stdout + result.stderr
    record = real_api.store.collection("sqldb_users").get(user["uuid"])
    assert scram.verifies("typed-password-1", record["password_hash"])
    # no terminal: no prompt, a usage error
    assert logged_in("sqldb", "users", "add", name, "-n", "carol").code != 0
    # stdin, then an update that prompts (`--password` without a value)
    ok(logged_in("--json", "sqldb", "users", "add", name, "-n", "carol",
                 "--password-stdin", stdin=remember("stdin-password") + "\n"))
    carol = real_api.store.collection("sqldb_users").find_one(instance=made["uuid"],
                                                               name="carol")
    assert scram.verifies("stdin-password", carol["password_hash"])
    logged_in.typed_password = remember("typed-password-2")
    changed = ok(logged_in("--json", "sqldb", "users", "update", name, "carol",
                           "--password", tty=True))
    assert changed["status"] == "NEW"
    carol = real_api.store.collection("sqldb_users").get(carol["uuid"])
    assert scram.verifies("typed-password-2", carol["password_hash"])


def test_refusals_reach_the_user(logged_in):
    name = f"r-{uuid.uuid4().hex[:6]}"
    make_instance(logged_in, name, "--disk-size", "20")
    shrink = logged_in("sqldb", "instances", "update", name, "--disk-size", "10")
    assert shrink.code != 0 and "shrink" in shrink.stderr
    short = logged_in("sqldb", "users", "add", name, "-n", "x", "--password", "short")
    assert short.code != 0 and "8 to 99" in short.stderr
    reserved = logged_in("sqldb", "users", "add", name, "-n", "pg_x", "--password",
                         "long-enough")
    assert reserved.code != 0 and "reserved" in reserved.stderr


def test_versions(logged_in):
    listed = ok(logged_in("--json", "sqldb", "versions", "list"))
    assert SEED_UUID in [v["uuid"] for v in listed]
    vname = f"v{uuid.uuid4().hex[:6]}"
    made = ok(logged_in("--json", "sqldb", "versions", "add", "-n", vname, "--major", "16"))
    assert (made["major"], made["deprecated"]) == (16, False)
    gone = ok(logged_in("--json", "sqldb", "versions", "update", vname, "--deprecated"))
    assert gone["deprecated"] is True
    refused = make_instance_result(logged_in, vname)
    assert refused.code != 0 and "deprecated" in refused.stderr
    assert ok(logged_in("--json", "sqldb", "versions", "show", "15"))["major"] == 15
    assert logged_in("sqldb", "versions", "delete", vname).code == 0


def make_instance_result(cli, version):
    return cli("sqldb", "instances", "add", "-n", "x", "-p", ADMIN_PROJECT, "-v", version,
               "--cpu", "1", "--ram", "512", "--disk-size", "8")


def test_help_names_the_commands(cli):
    for argv in (("sqldb", "--help"), ("sqldb", "instances", "add", "--help"),
                 ("sqldb", "users", "update", "--help"),
                 ("sqldb", "databases", "add", "--help")):
        result = cli(*argv)
        assert result.code == 0 and "example" in result.stdout, result.stderr


def test_placement_on_named_nodes_and_a_wait_that_ends_in_error(logged_in, real_api):
    nodes = [ok(logged_in("--json", "create", "compute/nodes", f"name=pg-{uuid.uuid4().hex[:6]}",
                          f"project_id={ADMIN_PROJECT}", "node_type=HW", "cores:=1",
                          "ram:=1024")) for _ in range(2)]
    name = f"n-{uuid.uuid4().hex[:6]}"
    made = make_instance(logged_in, name, "--node", nodes[0]["name"], "--node",
                         nodes[1]["uuid"])
    assert made["placement"] == {"kind": "nodes", "nodes": [n["uuid"] for n in nodes]}
    assert made["nodes_number"] == 2
    real_api.store.collection("sqldb_instances").update(made["uuid"], {
        "status": "ERROR", "status_reason": "no PostgreSQL on the nodes"})
    waited = logged_in("sqldb", "instances", "show", name, "--wait")
    assert waited.code != 0 and "no PostgreSQL on the nodes" in waited.stderr


def test_add_on_a_node_needs_no_sizes_and_wait_shows_each_reason_once(logged_in, real_api):
    """--wait (the CLI's shared wait) prints each new (status, status_reason) once, as the
    daemon writes them; a thread here plays the sqldb daemon, writing what it would."""
    node = ok(logged_in("--json", "compute", "nodes", "add", "-p", ADMIN_PROJECT, "-n",
                        f"hw-{uuid.uuid4().hex[:6]}", "-c", "1", "-r", "1024",
                        "node_type=HW"))
    name = f"w-{uuid.uuid4().hex[:6]}"
    instances = real_api.store.collection("sqldb_instances")
    moves = [("NEW", "waiting for nodes"), ("NEW", "waiting for nodes"),
             ("IN_PROGRESS", "node hw: waiting for the node's address"),
             ("IN_PROGRESS", "node hw: waiting for the node's address"),
             ("IN_PROGRESS", "node hw: the agent has not applied it yet"),
             ("ACTIVE", None)]

    def daemon():
        for _ in range(200):
            found = instances.find(name=name)
            if found:
                for status, reason in moves:
                    time.sleep(0.3)
                    instances.update(found[0]["uuid"], {"status": status,
                                                        "status_reason": reason})
                return
            time.sleep(0.05)
    thread = threading.Thread(target=daemon, daemon=True)
    thread.start()
    result = logged_in("--json", "sqldb", "instances", "add", "-n", name, "-p",
                       ADMIN_PROJECT, "-v", "15", "--node", node["uuid"], "--wait",
                       "--wait-timeout", "60")
    thread.join(10)
    made = ok(result)
    assert made["status"] == "ACTIVE"
    sent = logged_in.transport.to(INSTANCES)[-1].body
    assert not {"cpu", "ram", "disk_size"} & set(sent)
    lines = [line.split(": ", 1)[1].rsplit(" (", 1)[0]
             for line in result.stderr.splitlines()[1:]]
    wanted = ["NEW: waiting for nodes", "IN_PROGRESS: node hw: waiting for the node's address",
              "IN_PROGRESS: node hw: the agent has not applied it yet", "ACTIVE"]
    # each once, in order; the create's own NEW (no reason yet) may come first
    assert [line for line in lines if line != "NEW"] == wanted, result.stderr


def test_a_wait_that_ends_with_a_reason_says_it(logged_in, real_api):
    made = make_instance(logged_in, f"t-{uuid.uuid4().hex[:6]}")
    real_api.store.collection("sqldb_instances").update(made["uuid"], {
        "status": "NEW", "status_reason": "waiting for the address of node appliance"})
    result = logged_in("sqldb", "instances", "show", made["uuid"], "--wait",
                       "--wait-timeout", "0.5")
    assert result.code == 1
    assert "NEW: waiting for the address of node appliance (" in result.stderr
    assert "still NEW after 0.5 s: waiting for the address of node appliance" in \
        result.stderr
    assert "is the daemon running" not in result.stderr


def test_client_networks_option(logged_in):
    name = f"c-{uuid.uuid4().hex[:6]}"
    made = make_instance(logged_in, name, "--client-networks", "192.0.2.7, 10.0.0.0/8")
    assert made["client_networks"] == ["192.0.2.7/32", "10.0.0.0/8"]
    closed = ok(logged_in("--json", "sqldb", "instances", "update", name,
                          "--client-networks", ""))
    assert closed["client_networks"] == [] and closed["status"] == "IN_PROGRESS"
    back = ok(logged_in("--json", "sqldb", "instances", "update", name,
                        "--client-networks", "default"))
    assert back["client_networks"] is None
    bad = logged_in("sqldb", "instances", "update", name, "--client-networks", "10.0.0.0/33")
    assert bad.code != 0 and "client_networks.0" in bad.stderr
