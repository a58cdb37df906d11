"""A 1-node instance on real PostgreSQL, driven through Driver.apply/tick: users with SCRAM,
databases with owners, password change, drops, pg_hba, quoting, idempotence, removal."""

import os

import pytest

from appliance.sqldb.node import Driver
from tests.waiting import eventually

from . import pgnode
from .pgnode import Instance, Node, free_port, local_sql, psql, startup_from

base = pgnode.base

ADDRESS = "127.0.0.20"
OUTSIDER = "127.0.0.25"          # one of this part's addresses, left out of hba
CLIENT = "127.0.0.24"            # one in hba (psql's own source is 127.0.0.1, in hba too)


@pytest.fixture(scope="module")
def one(base):
    node = Node(base, ADDRESS)
    inst = Instance([node], free_port(ADDRESS, OUTSIDER),
                    hba=["127.0.0.1/32", f"{CLIENT}/32"])
    inst.set_password("alice", "alice-password-1")
    inst.databases["shop"] = "alice"
    result = inst.apply(node)
    assert result["status"] == "ACTIVE", result
    yield node, inst
    node.remove(inst.item(node))


def test_primary_report(one):
    node, inst = one
    result = inst.apply(node)
    assert result["status"] == "ACTIVE", result
    v = result["value"]
    assert v["role"] == "primary" and v["running"] is True and v["epoch"] == 0
    assert v["timeline"] == 1
    assert v["lsn_int"] > 0 and "/" in v["lsn"]
    assert v["streaming_from"] is None and v["sync_standbys"] == []
    assert v["users"] == {"alice": "ok"} and v["databases"] == {"shop": "ok"}
    assert v["checked_at"].endswith("Z")


def test_user_logs_in_with_scram_and_owns_its_database(one):
    node, inst = one
    code, out = psql(ADDRESS, inst.port, "alice", "alice-password-1",
                     "CREATE TABLE t (x int); INSERT INTO t VALUES (1); "
                     "SELECT current_user, (SELECT pg_get_userbyid(datdba) FROM pg_database "
                     "WHERE datname = current_database());", db="shop")
    assert code == 0, out
    assert out == "alice|alice"
    code, out = psql(ADDRESS, inst.port, "alice", "wrong-password", "SELECT 1", db="shop")
    assert code != 0 and "password authentication failed" in out
    # what PostgreSQL holds is the verifier the item gave, as it was given
    stored = local_sql(node, inst.uuid, inst.port,
                       "SELECT rolpassword FROM pg_authid WHERE rolname = 'alice'")
    assert stored == inst.users["alice"]


def test_changed_password(one):
    node, inst = one
    inst.set_password("alice", "alice-password-2")
    result = inst.apply(node)
    assert result["status"] == "ACTIVE" and result["value"]["users"] == {"alice": "ok"}
    code, out = psql(ADDRESS, inst.port, "alice", "alice-password-1", "SELECT 1", db="shop")
    assert code != 0 and "password authentication failed" in out
    code, out = psql(ADDRESS, inst.port, "alice", "alice-password-2", "SELECT 1", db="shop")
    assert (code, out) == (0, "1")


def test_same_item_twice_restarts_nothing(one):
    node, inst = one
    pid = node.postmaster(inst.uuid, inst.port)
    conf = os.path.join(node.cluster(inst.uuid, inst.port).data, "postgresql.conf")
    mtime = os.stat(conf).st_mtime_ns
    item = inst.item(node)
    for _ in range(2):
        assert node.apply(item)["status"] == "ACTIVE"
    node.tick()
    assert node.postmaster(inst.uuid, inst.port) == pid
    assert os.stat(conf).st_mtime_ns == mtime
    # a change of a setting that needs a restart restarts; one that does not, does not
    inst.hba.append("10.99.0.0/16")
    assert inst.apply(node)["status"] == "ACTIVE"
    assert node.postmaster(inst.uuid, inst.port) == pid
    inst.ram_mb = 512
    assert inst.apply(node)["status"] == "ACTIVE"
    assert node.postmaster(inst.uuid, inst.port) != pid
    assert local_sql(node, inst.uuid, inst.port, "SHOW shared_buffers") == "128MB"


def test_odd_names_are_quoted(one):
    node, inst = one
    odd = ['we$ird', "o'brien", 'quo"te', 'a"; DROP ROLE alice; --', "Mixed Case"]
    for i, name in enumerate(odd):
        inst.set_password(name, f"odd-password-{i}")
    inst.databases['db"; DROP DATABASE shop; --'] = "we$ird"
    inst.databases["o'db"] = "o'brien"
    result = inst.apply(node)
    assert result["status"] == "ACTIVE", result
    assert all(result["value"]["users"][n] == "ok" for n in odd), result["value"]["users"]
    assert result["value"]["databases"]['db"; DROP DATABASE shop; --'] == "ok"
    roles = local_sql(node, inst.uuid, inst.port,
                      "SELECT rolname FROM pg_roles WHERE oid >= 16384 ORDER BY 1").split("\n")
    assert set(odd) | {"alice"} <= set(roles)
    dbs = local_sql(node, inst.uuid, inst.port,
                    "SELECT datname FROM pg_database ORDER BY 1").split("\n")
    assert {"shop", 'db"; DROP DATABASE shop; --', "o'db"} <= set(dbs)
    for i, name in enumerate(odd):
        code, out = psql(ADDRESS, inst.port, name, f"odd-password-{i}", "SELECT current_user")
        assert (code, out) == (0, name)


def test_reserved_and_bad_entries_are_refused_one_by_one(one):
    node, inst = one
    inst.users["dbaas_admin"] = inst.users["alice"]
    inst.users["pg_monitor"] = inst.users["alice"]
    inst.users["plain"] = "not-a-verifier"
    inst.set_password("public", "public-password")     # PostgreSQL refuses the name
    inst.databases["template1"] = "alice"
    inst.databases["orphan"] = "nobody"
    try:
        result = inst.apply(node)
        assert result["status"] == "ACTIVE", result
        users, dbs = result["value"]["users"], result["value"]["databases"]
        assert users["dbaas_admin"] == users["pg_monitor"] == "a reserved role name"
        assert users["plain"] == "the password is not a SCRAM-SHA-256 verifier"
        assert users["alice"] == "ok"
        assert users["public"] == 'role name "public" is reserved'
        # the failed statement carried a verifier: the server logged the error, not it
        with open(node.cluster(inst.uuid, inst.port).log_file) as f:
            log = f.read()
        assert 'role name "public" is reserved' in log
        assert inst.users["public"] not in log and "STATEMENT" not in log
        assert dbs["template1"] == "a reserved database name"
        assert "nobody" in dbs["orphan"]
        assert "plain" not in local_sql(node, inst.uuid, inst.port,
                                        "SELECT string_agg(rolname, ',') FROM pg_roles")
    finally:
        for name in ("dbaas_admin", "pg_monitor", "plain", "public"):
            del inst.users[name]
        del inst.databases["template1"], inst.databases["orphan"]


def test_dropped_user_and_database(one):
    node, inst = one
    inst.set_password("bob", "bob-password-1")
    inst.databases["scratch"] = "bob"
    assert inst.apply(node)["status"] == "ACTIVE"
    # bob gets a privilege and owns a table in shop, which stays
    code, out = psql(ADDRESS, inst.port, "alice", "alice-password-2",
                     "GRANT CREATE ON SCHEMA public TO bob", db="shop")
    assert code == 0, out
    code, out = psql(ADDRESS, inst.port, "bob", "bob-password-1",
                     "CREATE TABLE mine (x int)", db="shop")
    assert code == 0, out
    del inst.databases["scratch"]
    del inst.users["bob"]
    result = inst.apply(node)
    assert result["status"] == "ACTIVE", result
    assert "bob" not in result["value"]["users"]
    assert "scratch" not in result["value"]["databases"]
    assert local_sql(node, inst.uuid, inst.port,
                     "SELECT count(*) FROM pg_roles WHERE rolname = 'bob'") == "0"
    assert local_sql(node, inst.uuid, inst.port,
                     "SELECT count(*) FROM pg_database WHERE datname = 'scratch'") == "0"
    # what bob owned in a database that stays is postgres's now
    assert local_sql(node, inst.uuid, inst.port,
                     "SELECT tableowner FROM pg_tables WHERE tablename = 'mine'",
                     db="shop") == "postgres"
    code, out = psql(ADDRESS, inst.port, "bob", "bob-password-1", "SELECT 1", db="shop")
    assert code != 0
    # the reserved roles and postgres's database stay
    assert local_sql(node, inst.uuid, inst.port,
                     "SELECT count(*) FROM pg_roles WHERE rolname IN "
                     "('dbaas_admin', 'dbaas_replicator', 'postgres')") == "3"


def test_hba_refuses_a_source_outside_it(one):
    node, inst = one
    kind, text = startup_from(OUTSIDER, ADDRESS, inst.port, "alice", "shop")
    assert kind == "E" and f'no pg_hba.conf entry for host "{OUTSIDER}"' in text
    kind, _ = startup_from(CLIENT, ADDRESS, inst.port, "alice", "shop")
    assert kind == "R"                       # inside hba: asked for the password
    # the reserved roles are refused from the clients' networks, password or not
    for reserved in ("dbaas_admin", "dbaas_replicator", "postgres"):
        kind, text = startup_from(CLIENT, ADDRESS, inst.port, reserved)
        assert kind == "E" and "rejects connection" in text, (reserved, text)
    # hba without 127.0.0.1: psql (whose source is 127.0.0.1) is refused too
    saved = list(inst.hba)
    inst.hba[:] = ["10.20.0.0/24", f"{CLIENT}/32"]
    try:
        assert inst.apply(node)["status"] == "ACTIVE"
        code, out = psql(ADDRESS, inst.port, "alice", "alice-password-2", "SELECT 1",
                         db="shop")
        assert code != 0 and "no pg_hba.conf entry" in out
    finally:
        inst.hba[:] = saved
        assert inst.apply(node)["status"] == "ACTIVE"
    assert psql(ADDRESS, inst.port, "alice", "alice-password-2", "SELECT 1",
                db="shop") == (0, "1")


def test_listens_on_its_own_address_only(one):
    node, inst = one
    assert local_sql(node, inst.uuid, inst.port, "SHOW listen_addresses") == ADDRESS
    code, out = psql("127.0.0.1", inst.port, "alice", "alice-password-2", "SELECT 1")
    assert code != 0 and "refused" in out


def test_heartbeat_and_restart_of_a_stopped_primary(one):
    node, inst = one
    node.apply(inst.item(node))
    first = eventually(lambda: node.tick(), 10, "a heartbeat")
    assert first[inst.item(node)["uuid"]]["status"] == "ACTIVE"
    node.kill(inst.uuid, inst.port)
    # the next tick starts it again; the report says so
    back = eventually(lambda: [r for r in node.tick().values()
                               if r["value"]["running"] and r["status"] == "ACTIVE"],
                      60, "the primary started again by the tick")
    assert back[0]["value"]["role"] == "primary"
    assert psql(ADDRESS, inst.port, "alice", "alice-password-2", "SELECT count(*) FROM t",
                db="shop") == (0, "1")


def test_an_agent_restart_changes_nothing(one):
    """A new driver (the agent restarted; PostgreSQL kept running) applies the item once
    at its first tick: nothing written, nothing restarted, the report is there at once."""
    node, inst = one
    item = inst.item(node)
    assert node.apply(item)["status"] == "ACTIVE"
    pid = node.postmaster(inst.uuid, inst.port)
    conf = os.path.join(node.cluster(inst.uuid, inst.port).data, "postgresql.conf")
    mtime = os.stat(conf).st_mtime_ns
    node.driver = Driver(node.host)
    first = node.tick()[item["uuid"]]
    assert first["status"] == "ACTIVE", first
    assert first["value"]["users"]["alice"] == "ok"
    assert node.postmaster(inst.uuid, inst.port) == pid
    assert os.stat(conf).st_mtime_ns == mtime


def test_the_server_log_is_kept_small(one):
    node, inst = one
    c = node.cluster(inst.uuid, inst.port)
    with open(c.log_file, "ab") as f:
        f.write(b"x" * 1024)
    assert not pgnode.pg.rotate_log(c, limit=10 ** 9)
    assert pgnode.pg.rotate_log(c, limit=1000)
    assert os.path.getsize(c.log_file) == 0 and os.path.getsize(c.log_file + ".1") > 1024
    # the server goes on writing the truncated file
    local_sql(node, inst.uuid, inst.port, "SELECT pg_reload_conf()")
    eventually(lambda: os.path.getsize(c.log_file) > 0, 30, "the server writing its log")
    with open(c.log_file, "rb") as f:
        assert not f.read(1).startswith(b"\0")          # not a sparse hole at the start
