"""Repo Proxy: repositories, their elements and artifacts, the marketplace's catalogs,
and installation through the Element Manager."""

from appliance.capability import Capability

CAPABILITY = Capability(
    name="repo",
    resources="appliance.repo.resources",
    register="appliance.repo:register",
    project_permissions="repo",
    seed="appliance.repo:seed_state",
)


def seed_state(store, settings):
    """The repository of repo_url, when it is set."""
    from .seed import seed  # noqa: PLC0415
    seed(store, settings.get("repo_url"))


def register(api):
    # Imported here: the daemons import this package's other modules without the API.
    from . import store
    from .resources import all_resources
    resources = all_resources()
    elements = next(r for r in resources if r.path == "/v1/repo/elements")
    for resource in resources + store.all_resources(elements):
        resource.register(api)
    store.register_index(api)
