"""The composition root: the WSGI application assembled from the REST framework
(`appliance/api/`) and every capability's routes."""

import importlib

from state import Store

from appliance.api import system
from appliance.migrations import latest
from appliance.api.routing import Api
from appliance.api.wsgi import Middleware


def capabilities():
    """Every capability package that registers routes, in registration order."""
    from appliance import agent, compute, configs, dns, em, iam, network, repo, secret, service, vs
    from appliance import lb, sqldb
    return [iam, secret, vs, dns, em, repo, compute, network, agent, configs, service, lb,
            sqldb]


def preload():
    """Import what build_api imports (every capability's resources), touching no state: the
    image's API does it while first boot still prepares the state (api_wait_for)."""
    for capability in capabilities():
        importlib.import_module(capability.__name__ + ".resources")


def build_api(settings, store=None):
    store = store or Store(settings["state_dir"])
    api = Api(settings, store)
    # the state's schema version is the code's own while a process serves: start-up
    # migrated an older state and refused a newer one (docs/migrations.md)
    system.register(api, {"schema_version": latest()})
    for capability in capabilities():
        # a package whose __init__ is only its docstring (appliance/lb, shared by two
        # branches) registers from its resources module
        register = getattr(capability, "register", None) or importlib.import_module(
            capability.__name__ + ".resources").register
        register(api)
    api.compile_routes()
    return api


def create_app(settings, store=None):
    api = build_api(settings, store)
    return Middleware(api.app), api
