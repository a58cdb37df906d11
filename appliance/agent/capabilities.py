"""Which capability produces and applies each kind of target resource: the tables read from
the capabilities' descriptors (their `targets`, appliance/capability.py).

Module paths, imported on first use: the API imports only the producers, a node's agent
only the drivers, so neither pulls in the other's code. The tables are plain dicts, so a
test may register a capability of its own (tests/agent/testcap.py).
"""

from appliance import capabilities
from appliance.capability import load

__all__ = ["DRIVERS", "MASTERS", "PLACEMENT", "PRODUCERS", "READS", "drivers", "load", "producers"]

_TARGETS = capabilities.targets()

# kind of target resource -> "module:function" called as function(view, node) -> [items]
PRODUCERS = {t.kind: t.producer for t in _TARGETS}

# kind of target resource -> "module:Class" built as Class(host) on the node
DRIVERS = {t.kind: t.driver for t in _TARGETS}

# kind of target resource -> the store kind of the record it comes from (its "master"),
# whose status the platform's status step writes; a kind without one writes its own
MASTERS = {t.kind: t.master for t in _TARGETS if t.master}

# master kinds placed by their capability rather than by a `target` field:
# "module:function" called as function(store, record) -> (status, reason) while the record
# is on no node (a judgement of no items would say ACTIVE), else None
PLACEMENT = {t.master: t.unplaced for t in _TARGETS if t.master and t.unplaced}

# the kinds producers read besides their masters, each once
READS = tuple(dict.fromkeys(kind for t in _TARGETS for kind in t.reads))


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
