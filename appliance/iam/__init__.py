"""IAM: identities, tokens and deny-by-default authorization."""

from appliance.capability import Capability

CAPABILITY = Capability(
    name="iam",
    resources="appliance.iam.resources",
    preload=("appliance.iam.auth",),        # the login and token routes (register)
    register="appliance.iam:register",
    seed="appliance.iam:seed_state",
)


def seed_state(store, settings):
    """The default organization, the admin project and user, the built-in roles."""
    from .seed import seed  # noqa: PLC0415
    seed(store, settings["admin_password"])


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from . import auth
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
    auth.register(api)
