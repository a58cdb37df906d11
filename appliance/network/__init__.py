"""Network: project networks, their ports and IPAM; the libvirt network step runs in the
compute daemon (reconcile.py)."""

from appliance.capability import Capability

CAPABILITY = Capability(
    name="network",
    resources="appliance.network.resources",
    register="appliance.network:register",
    project_permissions="network",
    check_settings="appliance.network.ipam:check_settings",
)


def register(api):
    # Imported here: the compute daemon imports this package's other modules without the API.
    from .resources import all_resources
    for resource in all_resources(api.settings):
        resource.register(api)
