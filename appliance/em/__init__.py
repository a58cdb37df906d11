"""Element Manager: manifests, elements (with their resources, imports and exports as
read-only views), and the builder's reconcile step."""

from . import parts
from .resources import all_resources


def register(api):
    for resource in all_resources() + parts.all_resources():
        resource.register(api)
