"""Configs: files delivered to nodes by the node agent (docs/configs.md)."""


def register(api):
    # Imported here: the agent imports this package's node side without the API.
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
