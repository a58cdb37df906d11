"""DNS: domains and records; the DNS server and the realm mirror are daemons."""


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from .resources import all_resources
    for resource in all_resources(api.settings):
        resource.register(api)
