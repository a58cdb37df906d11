"""Values Store: profiles, variables and the values bound to them."""

from appliance.capability import Capability

CAPABILITY = Capability(
    name="vs",
    resources="appliance.vs.resources",
    register="appliance.vs:register",
    project_permissions="vs",
    seed="appliance.vs:seed_state",
)


def seed_state(store, settings):
    """The built-in profiles, one of them active."""
    from .seed import seed  # noqa: PLC0415
    seed(store)


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
