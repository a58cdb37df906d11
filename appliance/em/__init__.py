"""Element Manager: manifests, elements, and the builder's reconcile step."""

from .resources import all_resources


def register(api):
    for resource in all_resources():
        resource.register(api)
