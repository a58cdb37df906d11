"""IAM: identities, tokens and deny-by-default authorization."""

from . import auth
from .resources import all_resources


def register(api):
    for resource in all_resources():
        resource.register(api)
    auth.register(api)
