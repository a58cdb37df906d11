"""Secrets: opaque secrets, passwords, SSH and RSA keys."""

from .resources import all_resources


def register(api):
    for resource in all_resources():
        resource.register(api)
