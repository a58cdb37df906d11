"""`exordos dbaas ...` (the reference CLI) against our appliance: it reaches us at
`<endpoint>/api/dbaas/v1/types/postgres/...`, the same records as `/v1/sqldb/...`. No
compute daemon places nodes here, so the instance stays NEW: these tests are about the
API's shapes, not the data plane."""

import uuid

from appliance.iam.builtin import ADMIN_PROJECT
from appliance.sqldb.versions import SEED_UUID

from tests.secret.conftest import remember

from .test_session import named, shown

PG = "/v1/types/postgres"


def test_versions_list(exordos):
    row = named(exordos.json("dbaas", "versions", "list"), "15")
    assert row["uuid"] == SEED_UUID
    assert shown(exordos.json("dbaas", "versions", "show", SEED_UUID))["name"] == "15"


def test_an_instance_with_a_user_and_a_database(exordos):
    given = str(uuid.uuid4())
    name = f"refcli-{given[:6]}"
    # the version by name: the CLI resolves it with ?name=
    exordos.ok("dbaas", "instances", "add", "-u", given, "-p", ADMIN_PROJECT, "-n", name,
               "-v", "15", "--cpu", "2", "--ram", "1024", "--disk-size", "10",
               "--nodes-number", "3", "--sync-replica-number", "1")
    row = named(exordos.json("dbaas", "instances", "list"), name)
    # the sqldb daemon may have moved it on already (no node is ever placed here)
    assert row["uuid"] == given and row["status"] in ("NEW", "IN_PROGRESS", "ERROR")
    detail = shown(exordos.json("dbaas", "instances", "show", given))
    # it reads back the form it wrote
    assert detail["version"] == f"{PG}/versions/{SEED_UUID}"
    assert (detail["cpu"], detail["nodes_number"], detail["sync_replica_number"]) == \
        ("2", "3", "1")
    exordos.ok("dbaas", "instances", "update", given, "--ram", "2048", "--disk-size", "12")
    detail = shown(exordos.json("dbaas", "instances", "show", given))
    assert (detail["ram"], detail["disk_size"]) == ("2048", "12")
    # a shrink is refused, and says why
    refused = exordos("dbaas", "instances", "update", given, "--disk-size", "10")
    assert refused.returncode != 0
    assert shown(exordos.json("dbaas", "instances", "show", given))["disk_size"] == "12"

    exordos.ok("dbaas", "users", "add", "-p", ADMIN_PROJECT, "-i", given, "-n", "alice",
               "--password", remember("refcli-password"))
    user = named(exordos.json("dbaas", "users", "list", "--instance-uuid", given), "alice")
    assert user["status"] in ("NEW", "ERROR") and "password" not in user
    # the owner by name: the CLI resolves it with ?name= under the instance
    exordos.ok("dbaas", "databases", "add", "-p", ADMIN_PROJECT, "-i", given, "-n", "orders",
               "--owner", "alice")
    db = named(exordos.json("dbaas", "databases", "list", "--instance-uuid", given), "orders")
    assert db["owner"] == f"{PG}/instances/{given}/users/{user['uuid']}"
    assert db["instance"] == f"{PG}/instances/{given}"
    exordos.ok("dbaas", "users", "update", user["uuid"], "-i", given, "--password",
               remember("refcli-password-2"))
    exordos.ok("dbaas", "instances", "delete", "-y", given)
    assert [r for r in exordos.json("dbaas", "instances", "list") if r["name"] == name] == []

