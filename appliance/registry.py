"""Every capability's resources in one process, without the HTTP application: what the
builder daemon runs manifests and repositories through (appliance/api/registry.py), so that
it never imports the composition root (appliance/app.py, which adds the routes, the Bottle
application and the middleware).
"""

from state import Store

from appliance.api.registry import Registry
from appliance.capabilities import descriptors
from appliance.capability import load


def build_registry(settings, store=None):
    """The resources of every capability, registered as build_api registers them: the same
    descriptors (appliance/capabilities.py), the same order."""
    registry = Registry(settings, store or Store(settings["state_dir"]))
    for capability in descriptors():
        load(capability.register)(registry)
    return registry
