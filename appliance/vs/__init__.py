"""Values Store: profiles, variables and the values bound to them."""

from .resources import all_resources


def register(api):
    for resource in all_resources():
        resource.register(api)
