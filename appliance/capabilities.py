"""The one list of capabilities, in registration order: the app registers their routes in
this order, and every other table (the agent's, the daemons', the settings, the seeds,
compute's owned sets) is read from their descriptors in this order
(appliance/capability.py, docs/architecture.md "The descriptor").

Adding a capability: write its package, with a `CAPABILITY` in its `__init__.py`, and add
its name here. Reading this list imports only the packages' `__init__` modules, which
hold declarations and nothing heavy.
"""

import importlib

from appliance.capability import Capability, Daemon

PACKAGES = ("iam", "secret", "vs", "dns", "em", "repo", "compute", "network", "agent",
            "configs", "service", "lb", "sqldb", "console")

# what no capability package owns: the scheduled backup of the whole state
# (appliance/backup.py, docs/backup.md)
PLATFORM = Capability(name="platform", daemons=(Daemon("backup"),))


def packages():
    """The capability packages (modules), in registration order."""
    return [importlib.import_module(f"appliance.{name}") for name in PACKAGES]


def descriptors():
    """Every capability's descriptor, in registration order."""
    return [package.CAPABILITY for package in packages()]


def everything():
    """The capabilities' descriptors, then the platform's own."""
    return descriptors() + [PLATFORM]


def targets():
    return [target for capability in descriptors() for target in capability.targets]


def daemons():
    return [daemon for capability in everything() for daemon in capability.daemons]


def settings():
    """{setting: default} that the capabilities declare."""
    out = {}
    for capability in descriptors():
        for name, default in capability.settings.items():
            if name in out:
                raise ValueError(f"setting {name} is declared twice")
            out[name] = default
    return out


def node_sets():
    return [sets for capability in descriptors() for sets in capability.node_sets]


def settings_checks():
    """The capabilities' settings checks ("module:function"), in registration order."""
    return [c.check_settings for c in descriptors() if c.check_settings]
