"""IAM: identities, tokens and deny-by-default authorization."""


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from . import auth
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
    auth.register(api)
