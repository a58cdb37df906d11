"""DNS: domains and records; the DNS server and the realm mirror are daemons."""

from .resources import all_resources


def register(api):
    for resource in all_resources(api.settings):
        resource.register(api)
