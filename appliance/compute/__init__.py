"""Compute: hypervisors, placement policies, nodes, node sets and volumes."""

from appliance.capability import Capability, Daemon

CAPABILITY = Capability(
    name="compute",
    resources="appliance.compute.resources",
    register="appliance.compute:register",
    project_permissions="compute",
    daemons=(Daemon("compute"),),
    # seconds between two readings of the VMs' libvirt stats (appliance/compute/stats.py)
    settings={"compute_stats_seconds": 15.0},
)


def register(api):
    # Imported here: the compute daemon imports this package's other modules without the API.
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
