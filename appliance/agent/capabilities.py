"""Which capability produces and applies each kind of target resource.

Module paths, imported on first use: the API imports only the producers, a node's agent
only the drivers, so neither pulls in the other's code.
"""

import importlib

# kind of target resource -> "module:function" called as function(view, node) -> [items]
PRODUCERS = {
    "config": "appliance.configs.targets:for_node",
    "service": "appliance.service.targets:for_node",
    "ssh_key": "appliance.secret.ssh_targets:for_node",
    "lb": "appliance.lb.targets:for_node",
    # not in MASTERS: its status is sqldb's own (appliance/sqldb/status.py, by its daemon)
    "sqldb": "appliance.sqldb.targets:for_node",
}

# kind of target resource -> "module:Class" built as Class(host) on the node
DRIVERS = {
    "config": "appliance.configs.node:Driver",
    "service": "appliance.service.node:Driver",
    "ssh_key": "appliance.secret.node:Driver",
    "lb": "appliance.lb.node:Driver",
    "sqldb": "appliance.sqldb.node:Driver",
}

# kind of target resource -> the store kind of the record it comes from (its "master"),
# whose status the platform's status step writes
MASTERS = {
    "config": "config_configs",
    "service": "em_services",
    "ssh_key": "secret_ssh_keys",
    "lb": "network_lb",
}


def load(path):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def producers():
    """{kind: function} for every kind whose module is installed."""
    return _loaded(PRODUCERS)


def drivers():
    """{kind: class} for every kind whose module is installed."""
    return _loaded(DRIVERS)


def _loaded(table):
    out = {}
    for kind, path in table.items():
        try:
            out[kind] = load(path)
        except ModuleNotFoundError:
            continue        # a capability not built into this install
    return out
