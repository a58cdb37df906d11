"""Who may target which node (docs/security.md, "Who may target which node").

Configs, services and SSH keys name the nodes they land on (`target`); a load balancer
names the node it runs on (`type`); a DBaaS instance may be placed on given nodes. Each of
them, once delivered, runs or writes something on that node as root. So each is checked
here, by one rule, before anything is written:

- a record names only nodes and node sets of its **own project** (whoever writes it: an
  admin writing in a project's record gets the same answer, so that the record never
  straddles two tenants);
- the **appliance's own node** (the admin project's HW node whose agent first boot
  enrolled as "appliance") is targeted only by records of the admin project, written by
  a platform caller. Not by a project's record even when an admin writes it: the
  project's owners may edit that record afterwards (a config's content and `on_change`
  command, a service's command, an LB's vhosts), which would hand them root on the
  appliance.

A caller that may not see the node it names (another project's, or the appliance's, seen
from a project) gets the same 400 "not found in project" as for a node that does not
exist, as a read of that node would be 404: nothing tells it what lies outside its
project.
"""

from appliance.api.errors import BadRequest, Forbidden
from appliance.kinds import ADMIN_PROJECT, COMPUTE_NODES, COMPUTE_SETS

from . import appliance_node, is_platform

NODES, SETS = COMPUTE_NODES, COMPUTE_SETS
KINDS = {"node": NODES, "nodes": NODES, "node_set": SETS}


def platform_record(principal, project_id):
    """True when a record of `project_id` written by `principal` is the platform's own: a
    platform caller writing in the admin project. Only such records run on the
    appliance's own node, and only such LBs bind ports below 1024 (docs/lb.md)."""
    return is_platform(principal) and project_id == ADMIN_PROJECT


def check_appliance_node(principal, project_id, where, alternatives):
    """The rule for a field that names the appliance's own node by what it is rather than
    by uuid (an LB's `type: core_agent`): its existence is no secret, so a project's
    caller is told plainly that it is the platform's (403), and a platform caller writing
    a project's record is told why not (400). `alternatives`: what to use instead."""
    if platform_record(principal, project_id):
        return
    if not is_platform(principal):
        raise Forbidden(f"{where}: runs on the appliance's own node, which only the "
                        f"platform may use; {alternatives}")
    raise BadRequest(f"{where}: only records of the admin project {ADMIN_PROJECT} run on "
                     "the appliance's own node (a project's owners could edit what runs "
                     f"there); {alternatives}")


def check_nodes(store, principal, project_id, kind, uuids, where, not_found=None):
    """400 unless every node (`kind` "node") or node set ("node_set") in `uuids` may be
    named by a record of `project_id` written by `principal` (the module's rule).
    `where(i)` names the field of the i-th uuid in messages; `not_found(uuid)` may give
    the message for one outside the project (the reference's own wording, for LBs).
    Returns the uuids in lower case (the stored form)."""
    collection = store.collection(NODES if kind == "node" else SETS)
    own = appliance_node(store) if kind == "node" else None
    what = kind.replace("_", " ")
    out = []
    for i, given in enumerate(uuids):
        uuid = given.lower()
        record = collection.get(uuid)
        appliance = own is not None and uuid == own["uuid"]
        if appliance and is_platform(principal) and not platform_record(principal,
                                                                          project_id):
            # a platform caller sees the node: tell it why, not "not found"
            raise BadRequest(f"{where(i)}: node {uuid} is the appliance's own node: only "
                             f"records of the admin project {ADMIN_PROJECT} target it (a "
                             "project's owners could edit what runs there)")
        if record is None or record.get("project_id") != project_id:
            raise BadRequest(not_found(uuid) if not_found else
                             f"{where(i)}: {what} {uuid} not found in project {project_id}: "
                             f"a record targets only {what}s of its own project")
        if appliance and not platform_record(principal, project_id):
            # only reached for an admin-project record written by a caller that is not
            # the platform: the resource layer lets none write there, yet the node stays
            # the platform's even then
            raise BadRequest(f"{where(i)}: node {uuid} is the appliance's own node, "
                             "which only the platform may target")
        out.append(uuid)
    return out


def lands_on(record, node):
    """The rule again where a record is rendered for a node (the producers of configs,
    services and SSH keys): a record lands only on nodes of its own project. A record
    written before the rule (services once let admins target any project's node) or a
    node moved since is not delivered, rather than trusted. The appliance's own node is
    the admin project's, so only the admin project's records land there."""
    return record.get("project_id") is not None and \
        record.get("project_id") == node.get("project_id")


def check_target(store, principal, project_id, target, where="target"):
    """A `target` field (appliance/targeting.py TARGET_SCHEMA: node, node_set or
    nodes) checked by `check_nodes`; its uuids are lower-cased in place."""
    kind = target["kind"]
    if kind == "nodes":
        target["nodes"] = check_nodes(store, principal, project_id, "node",
                                      target["nodes"], lambda i: f"{where}.nodes.{i}")
    else:
        target[kind] = check_nodes(store, principal, project_id, kind, [target[kind]],
                                   lambda i: where)[0]
    return target
