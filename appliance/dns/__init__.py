"""DNS: domains and records; the DNS server and the realm mirror are daemons."""

from appliance.capability import Capability, Daemon

CAPABILITY = Capability(
    name="dns",
    resources="appliance.dns.resources",
    register="appliance.dns:register",
    project_permissions="dns",
    daemons=(Daemon("dns"), Daemon("mirror", on_demand=("dns_domains",),
                                   is_work="appliance.dns:mirror_has_work")),
)


def mirror_has_work(domain):
    """A domain is work for the mirror only with sync_to_ecosystem."""
    return bool(domain.get("sync_to_ecosystem"))


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from .resources import all_resources
    for resource in all_resources(api.settings):
        resource.register(api)
