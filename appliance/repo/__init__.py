"""Repo Proxy: repositories, their elements and artifacts, the marketplace's catalogs,
and installation through the Element Manager."""

from . import store
from .resources import all_resources


def register(api):
    resources = all_resources()
    elements = next(r for r in resources if r.path == "/v1/repo/elements")
    for resource in resources + store.all_resources(elements):
        resource.register(api)
    store.register_index(api)
