"""The version seed: the PostgreSQL that this machine carries, as first boot and `appliance up`
(both through appliance.bootstrap) find it: the highest major with a server in
/usr/lib/postgresql/<major>/bin (17 in the Debian 13 images, 15 on a Debian 12 dev box).
A new instance on the appliance's own node, or on a node booted from the node image (built
from the same Debian release), then runs the version the list offers.

Idempotent and safe from several processes at once: under the versions' kind lock, it adds
the version only when its fixed uuid is missing, and never touches it afterwards (the
administrator may have changed its image or deprecated it since). When it adds the seed of
a new major (an appliance upgraded from Debian 12 to 13), an earlier seed whose major this
machine no longer carries is deprecated in the same step, once: existing instances keep
it (docs/sqldb.md, "Upgrading PostgreSQL"), new ones are offered the new major.
"""

import uuid

from appliance.kinds import ADMIN_PROJECT

from .pg import installed_majors

VERSIONS = "sqldb_versions"
# what image-build/packages/node.txt installs: the seed on a machine without PostgreSQL
NODE_IMAGE_MAJOR = 17


def seed_major(installed=None):
    majors = installed_majors() if installed is None else sorted(installed)
    return majors[-1] if majors else NODE_IMAGE_MAJOR


def seed_uuid(major):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"appliance:sqldb:version:{major}"))


SEED_MAJOR = seed_major()
SEED_NAME = str(SEED_MAJOR)
SEED_UUID = seed_uuid(SEED_MAJOR)
# the seeds that earlier releases made (Debian 12's PostgreSQL 15 onwards)
EARLIER_SEEDS = range(10, 100)


def seed(store, settings, installed=None):
    """`installed`: the majors this machine carries (default: what /usr/lib/postgresql has)."""
    installed = installed_majors() if installed is None else sorted(installed)
    major = seed_major(installed)
    name, key = str(major), seed_uuid(major)
    versions = store.collection(VERSIONS, unique=[("name",)])
    with versions.lock:
        if versions.get(key) is not None:
            return
        if versions.find_one(name=name) is not None:
            # an administrator made a version of that name before the seed first ran: theirs
            return
        versions.insert({
            "uuid": key, "project_id": ADMIN_PROJECT, "name": name,
            "major": major, "deprecated": False,
            "description": f"PostgreSQL {major}, as this machine and the node image carry it",
            "image": settings.get("sqldb_image") or ""})
        for old in EARLIER_SEEDS:
            record = versions.get(seed_uuid(old)) if old != major else None
            if record is None or record["deprecated"] or record["major"] in installed:
                continue
            versions.update(record["uuid"], {
                "deprecated": True,
                "description": f"PostgreSQL {record['major']}: no longer on this machine "
                               f"(upgraded); existing instances keep it, new ones use "
                               f"{name} (docs/sqldb.md, \"Upgrading PostgreSQL\")"[:255]})
