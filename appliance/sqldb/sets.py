"""Placement `node_set` (the default): each instance's hidden node set `dbaas-<name>`,
made, resized and deleted. The compute daemon runs this at the start of its pass (beside
appliance/lb/reconcile.py), just before the sets' own step gives the set its members.

The set is an ordinary set of the admin project (out of the instance project's sight)
whose uuid is the instance's and whose hidden field `sqldb` names it. Its nodes boot from
the version's image (else the node image of the setting `lb_image`, which carries
PostgreSQL), with a data disk of `disk_size` GB mounted where the driver keeps its data.
It never shrinks: a member leaving would take a copy of the data with it, and its
replacement would have to copy it back; nodes_number going down is the API's to refuse.

Its members name a soft-anti-affinity placement policy of their own (uuid = the
instance's, hidden field `sqldb`): without it placement only spreads by free RAM, so
two members may share a hypervisor whenever one has more room than the others, and a
replica on its primary's machine does not survive that machine. Soft, not hard: an
instance of more nodes than hypervisors still gets its nodes.
"""

from appliance.compute.owned_sets import reconcile_owned
from appliance.compute.placement import SOFT_ANTI
from appliance.kinds import ADMIN_PROJECT

from .members import INSTANCES, VERSIONS

DATA_MOUNT = "/var/lib/appliance/sqldb"
ROOT_SIZE = 10
POLICIES = "compute_placement_policies"


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
            "placement_policies": [instance["uuid"]], "network": None,
            "sqldb": instance["uuid"]}


def policy_record(instance):
    """The instance's members' spread: a soft-anti-affinity policy of the admin project."""
    return {"uuid": instance["uuid"], "name": f"dbaas-{instance['name']}",
            "project_id": ADMIN_PROJECT, "description": "spreads the nodes of DBaaS "
            f"instance {instance['uuid']} over the hypervisors", "tags": ["dbaas"],
            "kind": SOFT_ANTI, "sqldb": instance["uuid"]}


def reconcile_policies(store, wanted):
    """Each wanted instance's policy made, an instance's gone with it; records written."""
    policies = store.collection(POLICIES)
    written = 0
    for record in [p for p in policies.records() if p.get("sqldb")]:
        if record["sqldb"] not in wanted:
            policies.delete(record["uuid"])
            written += 1
    fresh = [policy_record(i) for u, i in wanted.items() if policies.get(u) is None]
    if fresh:
        policies.insert_many(fresh)
    return written + len(fresh)


def reconcile_sqldb_sets(store, settings):
    """One pass; returns the number of records written."""
    wanted = {i["uuid"]: i for i in store.collection(INSTANCES).records()
              if (i.get("placement") or {}).get("kind", "node_set") == "node_set"}

    def desired(instance, current):
        image = image_of(store, instance, settings)
        return set_record(instance, image, (current or {}).get("replicas") or 0) \
            if image else None
    # the policy before the set (its members name it from their first placement), and
    # only with the set: an instance waiting for an image has neither
    written = reconcile_policies(store, {u: i for u, i in wanted.items()
                                         if image_of(store, i, settings)})
    return written + reconcile_owned(store, "sqldb", wanted, desired)
