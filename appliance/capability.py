"""The descriptor of a capability: what the rest of the appliance needs to know about it,
as data (docs/architecture.md, "The descriptor").

Each capability package exports one `CAPABILITY` from its `__init__.py`, and
appliance/capabilities.py lists the packages. The app, the agent's tables, the daemon
list, bootstrap, the settings and compute's pass read these descriptors instead of naming
capabilities, so adding one is writing its package and one line of that list.

Code is named by "module:attribute" strings, imported only by whoever uses it (`load`):
reading a descriptor imports nothing, so the daemons and the node agent can read them
without the API's code.
"""

import importlib
from dataclasses import dataclass, field


def load(path):
    """The attribute that a "module:attribute" string names, its module imported."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Target:
    """A kind of target resource that node agents apply (docs/agent.md)."""
    kind: str
    # "module:function" called as function(view, node) -> [items], on the platform
    producer: str
    # "module:Class" built as Class(host) on the node
    driver: str
    # the store kind of the record the items come from, whose status the agent's status
    # step writes; None when the capability writes that status itself
    master: str = None
    # "module:function" called as function(store, record) -> (status, reason) while a
    # master placed by its capability (not by a `target` field) is on no node, else None
    unplaced: str = None
    # store kinds the producer reads besides the master (links, children): a write to one
    # can move the master's status, so the status step watches them
    reads: tuple = ()


@dataclass(frozen=True)
class Daemon:
    """A process of its own: `python -m daemons.<name>`, one systemd unit."""
    name: str
    # the store kinds whose first write starts it (docs/on-demand-daemons.md); empty (and
    # no on_demand_masters): it runs from the start
    on_demand: tuple = ()
    # it starts also at the first write to any master kind of the capabilities' targets
    # (Target.master): the agent's status step (daemons/status.py) has work once one of
    # them holds a record. A flag, not kinds: the masters are read from every descriptor,
    # so the daemon's own descriptor names no other capability's kinds
    on_demand_masters: bool = False
    # "module:function" called as function(record) -> bool: whether a record of its
    # on-demand kinds is work for it (first boot's check); None: any record is
    is_work: str = None


@dataclass(frozen=True)
class NodeSets:
    """Hidden node sets a capability owns (appliance/compute/owned_sets.py): compute's
    pass calls `reconcile` first, and watches `watches` for it."""
    # "module:function" called as function(store, settings) -> records written
    reconcile: str
    watches: tuple = ()


@dataclass(frozen=True)
class Capability:
    name: str
    # the module holding the capability's API resources (imported ahead by preload), and
    # "module:function" called as function(api) to register its routes
    resources: str = None
    register: str = None
    targets: tuple = ()             # Target
    daemons: tuple = ()             # Daemon
    # "module:function" called as function(store, settings) by bootstrap at every start;
    # settings carry the effective admin_password
    seed: str = None
    # setting name -> default, merged into appliance.config.DEFAULTS
    settings: dict = field(default_factory=dict)
    node_sets: tuple = ()           # NodeSets
    # a module declaring an element built into the appliance (appliance/em/builtin.py):
    # NAME, VERSION, COLLECTIONS, FOLLOWS_STATUS and exports(store)
    builtin_element: str = None
    # "module:function" called as function(settings) at every load of the settings; it
    # raises ValueError naming the setting when the capability's settings cannot work
    check_settings: str = None
    # the first word of the permissions of its resources that live in projects: a
    # project's owner gets every one of them (appliance/iam/builtin.py); None: none do
    project_permissions: str = None
    # the user owning <state>/<name>/ when it is not the appliance's: first boot leaves
    # that folder to it (appliance/firstboot/__init__.py)
    state_dir_owner: str = None
    # modules its routes import besides `resources`, which the supervisor imports ahead too
    # (appliance/supervisor.py, preload)
    preload: tuple = ()
