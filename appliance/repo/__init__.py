"""Repo Proxy: repositories, their elements, and installation through the Element Manager."""

from .resources import all_resources


def register(api):
    for resource in all_resources():
        resource.register(api)
