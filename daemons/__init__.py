"""Background daemons of the appliance, each a process of its own (`python -m daemons.<name>`).

DAEMONS is the one list of them, read from the capabilities' descriptors
(appliance/capabilities.py, each `Daemon` of a `CAPABILITY`): `appliance up` starts
exactly these, and systemd/ has one unit per entry (tests/firstboot/test_units.py).
Reading it imports only the descriptors, which import nothing heavy.

ON_DEMAND names the daemons that the appliance image starts only once they have work, and
the kinds whose records are that work (docs/on-demand-daemons.md): each has a systemd path
unit that starts it at the first write to one of those kinds, and first boot starts it at
boot when one of them holds a record. Once started, a daemon runs until shutdown. The
other daemons (and `appliance up`, which starts every daemon) run from the start.
"""

from appliance import capabilities as _capabilities


def _on_demand(daemon):
    kinds = daemon.on_demand
    if daemon.on_demand_masters:
        # the masters of what node agents apply (appliance.agent.capabilities.MASTERS)
        kinds += tuple(t.master for t in _capabilities.targets() if t.master)
    return tuple(dict.fromkeys(kinds))


DAEMONS = [daemon.name for daemon in _capabilities.daemons()]

ON_DEMAND = {daemon.name: _on_demand(daemon) for daemon in _capabilities.daemons()
             if _on_demand(daemon)}

# an on-demand daemon -> "module:function" telling whether a record of its kinds is work
# for it (first boot's check, appliance/firstboot/ondemand.py); absent: any record is
IS_WORK = {daemon.name: daemon.is_work for daemon in _capabilities.daemons()
           if daemon.name in ON_DEMAND and daemon.is_work}


def module_of(name):
    """The module that `python -m` runs for a daemon of DAEMONS."""
    return f"daemons.{name}"
