"""Placement `node_set` (the default): each instance's hidden node set `dbaas-<name>`,
made, resized and deleted. The compute daemon runs this at the start of its pass (beside
appliance/lb/reconcile.py), just before the sets' own step gives the set its members.

The set is an ordinary set of the admin project (out of the instance project's sight)
whose uuid is the instance's and whose hidden field `sqldb` names it. Its nodes boot from
the version's image (else the node image of the setting `lb_image`, which carries
PostgreSQL), with a data disk of `disk_size` GB mounted where the driver keeps its data.
It never shrinks: a member leaving would take a copy of the data with it, and its
replacement would have to copy it back; nodes_number going down is the API's to refuse.
"""

from appliance.compute.owned_sets import reconcile_owned
from appliance.kinds import ADMIN_PROJECT

from .members import INSTANCES, VERSIONS

DATA_MOUNT = "/var/lib/appliance/sqldb"
ROOT_SIZE = 10


def image_of(store, instance, settings):
    version = store.collection(VERSIONS).get(instance.get("version") or "")
    return ((version or {}).get("image") or settings.get("lb_image")) or None


def set_record(instance, image, current_replicas=0):
    return {"uuid": instance["uuid"], "name": f"dbaas-{instance['name']}",
            "project_id": ADMIN_PROJECT, "description": "the nodes of DBaaS instance "
            f"{instance['uuid']}", "tags": ["dbaas"], "cores": instance["cpu"],
            "ram": instance["ram"],
            "replicas": max(instance["nodes_number"], current_replicas),
            "node_type": "VM", "set_type": "SET",
            "disk_spec": {"kind": "disks", "disks": [
                {"image": image, "size": ROOT_SIZE, "tier": "WARM", "ephemeral": True},
                {"label": "sqldb-data", "size": instance["disk_size"],
                 "mount_point": DATA_MOUNT, "fs": "ext4", "tier": "WARM",
                 "ephemeral": True}]},
            "placement_policies": [], "network": None, "sqldb": instance["uuid"]}


def reconcile_sqldb_sets(store, settings):
    """One pass; returns the number of records written."""
    wanted = {i["uuid"]: i for i in store.collection(INSTANCES).records()
              if (i.get("placement") or {}).get("kind", "node_set") == "node_set"}

    def desired(instance, current):
        image = image_of(store, instance, settings)
        return set_record(instance, image, (current or {}).get("replicas") or 0) \
            if image else None
    return reconcile_owned(store, "sqldb", wanted, desired)
