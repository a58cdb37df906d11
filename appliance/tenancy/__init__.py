"""The tenant rule, in one place (docs/security.md).

A project is a tenant. What a project's user creates may reach only that project's
names, nodes, networks and data; the appliance's own node, its ports, loopback and
internal addresses, and the platform's zones and networks are the platform's alone.
Every field that names a node, a network, an address, a URL, a zone or a path is checked
by a module of this package, never by a rule written again inside a capability:

- `nodes`: who may target which node (configs, services, SSH keys, LBs, DBaaS placement);
- `addresses`: which addresses a project's LB pools and fetches may reach;
- `fetch`: the one guarded fetcher that daemons use for a project's URLs;
- `zones`: who may own which DNS zone;
- `underlay`: who may set a hypervisor's underlay address, and which address it may be.
"""

from appliance.kinds import ADMIN_PROJECT, COMPUTE_NODES, UA_AGENTS


def is_platform(principal):
    """A caller acting for the platform, not for one project: in-process code (no
    principal), an unscoped user token, or one scoped to the admin project. A node
    agent's principal has no project either, yet it acts only for its own node: it is
    never the platform."""
    if principal is None:
        return True
    if getattr(principal, "node", None) is not None:
        return False
    return principal.project_id in (None, ADMIN_PROJECT)


def is_platform_project(project_id):
    """True for records the platform owns (the admin project's)."""
    return project_id == ADMIN_PROJECT


APPLIANCE_AGENT = "appliance"       # the name first boot gives the appliance's own agent


def appliance_node(store):
    """The appliance's own node record, or None when first boot registered none: the
    admin project's HW node of the agent named "appliance" (an agent of that name on a
    project's node, or on a VM, is not it)."""
    nodes = store.collection(COMPUTE_NODES)
    for agent in sorted(store.collection(UA_AGENTS).records(), key=lambda a: a["uuid"]):
        if agent.get("name") == APPLIANCE_AGENT:
            node = nodes.get(agent.get("node") or "")
            if node is not None and node.get("project_id") == ADMIN_PROJECT and \
                    node.get("node_type") == "HW":
                return node
    return None
