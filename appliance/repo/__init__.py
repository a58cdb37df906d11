"""Repo Proxy: repositories, their elements and artifacts, the marketplace's catalogs,
and installation through the Element Manager."""


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from . import store
    from .resources import all_resources
    resources = all_resources()
    elements = next(r for r in resources if r.path == "/v1/repo/elements")
    for resource in resources + store.all_resources(elements):
        resource.register(api)
    store.register_index(api)
