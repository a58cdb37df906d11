"""The producer of services: what each node must run (parts.md, "Target resources").

One item per service that targets the node, carrying everything the node's driver needs:
the unit's name and text, whether it runs now and at boot, and the action counters whose
change makes the driver restart it. Ordering between services is resolved here, per node:
an entry naming a service that also runs on this node becomes After=/Before= its unit.
"""

from appliance.kinds import target_uuid

# not from resources.py: the delivery daemon's status step runs this producer, and it has
# no use for the API framework
from . import unit
from .records import KIND, MONOPOLY_KINDS, TARGET_STATUSES


def for_node(view, node):
    mine = [s for s in view.store.collection(KIND).records()
            if view.delivers(s, node)]
    units = {s["uuid"]: unit.unit_name(s, target_uuid(node["uuid"], "service", s["uuid"]))
             for s in mine}
    return [item(node, service, units) for service in mine]


def item(node, service, units):
    boot, run = TARGET_STATUSES[service.get("target_status") or "enabled"]
    kind = service["service_type"]["kind"]
    return {
        "uuid": target_uuid(node["uuid"], "service", service["uuid"]),
        "kind": "service",
        "master": service["uuid"],
        "master_kind": KIND,
        "value": {
            "service": service["uuid"],
            "unit": units[service["uuid"]],
            "text": unit.render(service, units),
            "type": kind,
            "oneshot": unit.SYSTEMD_TYPE[kind] == "oneshot",
            "monopoly": kind in MONOPOLY_KINDS,
            # a monopoly unit starts only where the lease is: never at boot by itself
            "boot": boot and kind not in MONOPOLY_KINDS,
            "run": run,
            "restart": service.get("restart_counter") or 0,
            "update": service.get("update_counter") or 0,
        },
    }
