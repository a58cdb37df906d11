"""Secrets: opaque secrets, passwords, SSH and RSA keys."""


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
