"""Every capability's resources in one process, without the HTTP application: what the
builder daemon runs manifests and repositories through (appliance/api/registry.py), so that
it never imports the composition root (appliance/app.py, which adds the routes, the Bottle
application and the middleware).
"""

import importlib

from state import Store

from appliance.api.registry import Registry


def capabilities():
    """Every capability package that registers resources, in registration order: the
    order of appliance/app.py's capabilities() (tests/supervisor/test_imports.py checks
    that both register the same resources in the same order)."""
    from appliance import agent, compute, configs, dns, em, iam, network, repo, secret, service, vs
    from appliance import lb, sqldb
    return [iam, secret, vs, dns, em, repo, compute, network, agent, configs, service, lb,
            sqldb]


def build_registry(settings, store=None):
    """The resources of every capability, registered as build_api registers them."""
    registry = Registry(settings, store or Store(settings["state_dir"]))
    for capability in capabilities():
        # as in build_api: a package whose __init__ is only its docstring registers from
        # its resources module
        register = getattr(capability, "register", None) or importlib.import_module(
            capability.__name__ + ".resources").register
        register(registry)
    return registry
