"""Bodies, paths and checks of the DBaaS API tests."""

import uuid

from appliance.sqldb.versions import SEED_UUID
from tests.compute.conftest import created, refused
from tests.iam.helpers import ADMIN_PROJECT

INSTANCES = "/v1/sqldb/instances"
VERSIONS = "/v1/types/sqldb/versions"
KINDS = ("sqldb_versions", "sqldb_instances", "sqldb_users", "sqldb_databases")
SIZES = {"cpu": 1, "ram": 512, "disk_size": 8}


def snapshot(server):
    """Every DBaaS record with its revision: equal before and after a refused write."""
    return {k: sorted((r["uuid"], r["revision"]) for r in server.store.collection(k).records())
            for k in KINDS}


def refused_unchanged(server, request, status):
    """Run `request` (a callable) and check it is refused with `status`, changing nothing."""
    before = snapshot(server)
    message = refused(request(), status)
    assert snapshot(server) == before
    return message


def make_instance(client, project=ADMIN_PROJECT, **fields):
    body = {"name": f"db-{uuid.uuid4().hex[:8]}", "project_id": project,
            "version": SEED_UUID, **SIZES, **fields}
    return created(client.post(INSTANCES, body))


def users(instance):
    return f"{INSTANCES}/{instance['uuid']}/users"


def databases(instance):
    return f"{INSTANCES}/{instance['uuid']}/databases"


def make_user(client, instance, name=None, password="password-1"):
    return created(client.post(users(instance), {
        "name": name or f"u_{uuid.uuid4().hex[:8]}", "password": password}))
