"""Element Manager: manifests, elements (with their resources, imports and exports as
read-only views), and the builder's reconcile step."""


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from . import parts
    from .resources import all_resources
    for resource in all_resources() + parts.all_resources():
        resource.register(api)
