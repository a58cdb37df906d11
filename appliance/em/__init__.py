"""Element Manager: manifests, elements (with their resources, imports and exports as
read-only views), and the builder's reconcile step."""

from appliance.capability import Capability, Daemon
from appliance.kinds import REPO_ARTIFACTS, REPO_ELEMENTS, REPO_REPOSITORIES

CAPABILITY = Capability(
    name="em",
    resources="appliance.em.resources",
    register="appliance.em:register",
    # repositories' sync, the bridge to the Element Manager and the elements' own step
    # (daemons/builder.py): the repositories' and the Element Manager's kinds are its work
    daemons=(Daemon("builder", on_demand=(REPO_REPOSITORIES, REPO_ELEMENTS,
                                          REPO_ARTIFACTS, "em_manifests", "em_elements")),),
)


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from . import parts
    from .resources import all_resources
    for resource in all_resources() + parts.all_resources():
        resource.register(api)
