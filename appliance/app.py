"""The composition root: the WSGI application assembled from the REST framework
(`appliance/api/`) and every capability's routes."""

import importlib

from state import Store

from appliance import daemon_state, metrics
from appliance import audit
from appliance.api import events, system
from appliance.api.audit import open_trail
from appliance.capability import load
from appliance.migrations import latest
from appliance.api.routing import Api
from appliance.api.wsgi import Middleware


def capabilities():
    """Every capability's descriptor, in registration order (appliance/capabilities.py)."""
    from appliance.capabilities import descriptors  # noqa: PLC0415
    return descriptors()


def preload():
    """Import what build_api imports (every capability's resources), touching no state: the
    image's API does it while first boot still prepares the state (api_wait_for)."""
    for capability in capabilities():
        importlib.import_module(capability.resources)


def build_api(settings, store=None):
    store = store or Store(settings["state_dir"])
    api = Api(settings, store)
    # the state's schema version is the code's own while a process serves: start-up
    # migrated an older state and refused a newer one (docs/migrations.md)
    system.register(api, {"schema_version": latest()})
    metrics.register(api)
    daemon_state.register(api)
    api.trail = open_trail(settings)
    api.closers.append(api.trail.close)
    audit.register(api)
    for capability in capabilities():
        load(capability.register)(api)
    events.register(api)
    metrics.declare_long_lived(events.EVENT_STREAM)
    api.events.gauge = metrics.long_lived
    # last: the hubs above end their waits first, then the loop they wait on stops
    api.closers.append(api.eventloop.stop)
    api.compile_routes()
    return api


def create_app(settings, store=None):
    api = build_api(settings, store)
    return Middleware(metrics.instrument(api.answers.wrap(api.app), api.store),
                      api.trail), api
