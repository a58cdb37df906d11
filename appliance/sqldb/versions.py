"""The version seed: the PostgreSQL that the node image carries, as first boot and
`appliance up` (both through appliance.bootstrap) find it.

Idempotent and safe from several processes at once: under the versions' kind lock, it adds
the version only when its fixed uuid is missing, and never touches it afterwards (the
administrator may have changed its image or deprecated it since).
"""

import uuid

from appliance.kinds import ADMIN_PROJECT

VERSIONS = "sqldb_versions"
SEED_NAME = "15"
SEED_MAJOR = 15
SEED_UUID = str(uuid.uuid5(uuid.NAMESPACE_URL, "appliance:sqldb:version:15"))


def seed(store, settings):
    versions = store.collection(VERSIONS, unique=[("name",)])
    with versions.lock:
        if versions.get(SEED_UUID) is not None:
            return
        if versions.find_one(name=SEED_NAME) is not None:
            # an administrator made a "15" of their own before the seed first ran: theirs
            return
        versions.insert({
            "uuid": SEED_UUID, "project_id": ADMIN_PROJECT, "name": SEED_NAME,
            "major": SEED_MAJOR, "deprecated": False,
            "description": "PostgreSQL 15, as the node image carries it",
            "image": settings.get("sqldb_image") or ""})
