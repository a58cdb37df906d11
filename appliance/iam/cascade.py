"""`DELETE /v1/iam/projects/<uuid>?cascade=true`: a project and everything it holds.

Without `cascade`, a project that holds anything is in use (appliance/api/links.py: every
project-scoped record links to its project) and its delete is a 409 naming what it holds.
With it, the project's records are deleted in an order that the in-use rule accepts, and
then the project. It refuses (409, naming them) while the project still runs workloads:
nodes, node sets, load balancers and DBaaS instances take the daemons' time to go, and a
project removed under them would leave machines nobody owns. It also refuses, before
deleting anything, when a record cannot go: one that a record outside the project uses,
one an installed element owns, or one whose kind refuses it (the active profile).
"""

from appliance.api import links
from appliance.api.errors import ApiError, BadRequest, Conflict, Forbidden, NotFound
from appliance.api.routing import SystemCall
from appliance.kinds import COMPUTE_NODES, COMPUTE_SETS, NETWORK_LB, SQLDB_INSTANCES

WORKLOADS = (COMPUTE_NODES, COMPUTE_SETS, NETWORK_LB, SQLDB_INSTANCES)
BINDINGS = "iam_role_bindings"
SHOWN = 10


def truthy(text):
    if text.lower() not in ("", "true", "false"):
        raise BadRequest("cascade: must be true or false")
    return text.lower() == "true"


def holdings(api, project_uuid):
    """[(resource, record)] of every record that belongs to the project: its
    project-scoped records and the role bindings that name it."""
    registry = links.registry(api)
    found = []
    for resource in registry.resource_of.values():
        if resource.project_scoped and resource.field("project_id") is not None:
            found += [(resource, r) for r in resource.collection().by("project_id",
                                                                        project_uuid)]
    bindings = registry.resource_of[BINDINGS]
    found += [(bindings, r) for r in bindings.collection().by("project", project_uuid)]
    return found


def goes_with_owner(registry, resource, record, inside):
    """True for a part (api/links.py) of a record that the cascade deletes: a domain's
    records, a repository's elements go with it."""
    return any(link.part and link.field and (link.used_kind, record.get(link.field)) in inside
               for link in registry.links if link.user_kind == resource.kind)


def named(registry, pairs):
    shown = [registry.describe(resource.kind, r) for resource, r in pairs[:SHOWN]]
    if len(pairs) > SHOWN:
        shown.append(f"{len(pairs) - SHOWN} more")
    return ", ".join(shown)


def delete_project(projects, call, project):
    """Delete the project's records, then the project; ApiError before anything is
    deleted when that cannot be done."""
    api = projects.api
    registry = links.registry(api)
    held = holdings(api, project["uuid"])
    running = [(res, r) for res, r in held if res.kind in WORKLOADS]
    if running:
        raise Conflict(f"project {project['name']!r} still runs {named(registry, running)}: "
                       "delete them first and wait until they are gone (a node, set, load "
                       "balancer or DBaaS instance takes the daemons' time to go); then "
                       "delete the project with cascade=true")
    principal = call.principal
    if principal is not None:
        denied = sorted({res.permission("delete") for res, _ in held
                         if not principal.allows(res.permission("delete"))})
        if denied:
            raise Forbidden(f"cascade=true deletes every record of the project: permission "
                            f"{', '.join(denied)} is required")
    inside = {(res.kind, r["uuid"]) for res, r in held}
    system = SystemCall(api, None)
    blockers = []
    for resource, record in held:
        if goes_with_owner(registry, resource, record, inside):
            continue
        if "delete" not in resource.operations:
            blockers.append(f"{registry.describe(resource.kind, record)} is removed by the "
                            "daemons (wait until they have, and try again)")
            continue
        try:
            resource.check_delete(system, record)
        except ApiError as e:
            blockers.append(f"{registry.describe(resource.kind, record)}: {e.message}")
            continue
        outside = [(link, user) for link, user in registry.users_of(api.store, resource.kind,
                                                                     record)
                   if (link.user_kind, user["uuid"]) not in inside]
        if outside:
            users = ", ".join(registry.describe(link.user_kind, user)
                              if registry.visible(call, link.user_kind, user)
                              else "a record you cannot see" for link, user in outside[:3])
            blockers.append(f"{registry.describe(resource.kind, record)} is used by {users}")
    if blockers:
        raise Conflict(f"project {project['name']!r} cannot be deleted with cascade: "
                       + "; ".join(blockers[:SHOWN]) + (
                           f"; and {len(blockers) - SHOWN} more" if len(blockers) > SHOWN
                           else ""))
    # in passes: a record goes once nothing left links to it (a vhost before its
    # certificate, a config before its password)
    pending = [(res, r) for res, r in held
               if not goes_with_owner(registry, res, r, inside)]
    while pending:
        left = []
        for resource, record in pending:
            try:
                resource.delete_record(system, record["uuid"])
            except NotFound:
                pass        # went with its parent
            except ApiError:
                left.append((resource, record))
        if len(left) == len(pending):
            raise Conflict(f"project {project['name']!r}: {named(registry, left)} could not "
                           "be deleted (they link to each other, or changed meanwhile); "
                           "delete them, then the project")
        pending = left
