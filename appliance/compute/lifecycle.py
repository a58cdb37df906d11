"""The life cycle of compute's records, as the API and the compute daemon both write it: the
statuses, what a new node starts with, which writes send a record back to IN_PROGRESS,
what a set decides for its members, which machines the daemon builds and when a node
should run.

Written once here, with no import of the API framework: the compute daemon imports it
(tests/supervisor/test_imports.py), and the API's hooks (resources.py) call the same rule.
"""

STATUSES = ("NEW", "SCHEDULED", "IN_PROGRESS", "STARTED", "ACTIVE", "ERROR")
NEW = {"status": "NEW", "status_reason": None}
# a write of what a record is (a PUT, a set's rolling update of a member, an attach or a
# detach) returns it to IN_PROGRESS: the daemon makes it again (the reference's "PUT
# resets status")
REDO = {"status": "IN_PROGRESS", "status_reason": None}
# what a set decides for its members: a rolling update brings a member in line with it,
# and a PUT of these fields on a member is refused
SET_TEMPLATE = ("cores", "ram", "disk_spec", "placement_policies")


def new_node():
    """The fields every new node starts with, whoever makes it (the API, a set's planner)."""
    return {**NEW, "default_network": {}, "power_state": "on"}


def redone(changes):
    """`changes` (a PUT's) with the status back to IN_PROGRESS."""
    changes.update(REDO)
    return changes


def built_by_daemon(node):
    """A VM node is placed and built by the compute daemon; a HW node is a machine of its
    own (the appliance itself, or one its agent enrolls): nothing moves its status on."""
    return node.get("node_type", "VM") == "VM"


def wants_power(node):
    """Whether the node should run: power_off stops it, power_on (the default) runs it."""
    return node.get("power_state", "on") != "off"


# a node whose hypervisor does not answer: ERROR with this reason, and back to what its
# domain really is once the hypervisor answers again (docs/compute-daemon.md)
UNREACHABLE = " is unreachable: "


def unreachable_reason(hv, message):
    name = hv.get("name") or hv["uuid"]
    return f"hypervisor {name} ({hv['uuid']}){UNREACHABLE}{message}"


def waits_for_hypervisor(node):
    """Whether the node is in ERROR only because its hypervisor did not answer."""
    why = node.get("status_reason") or ""
    return node.get("status") == "ERROR" and why.startswith("hypervisor ") \
        and UNREACHABLE in why
