"""The node agent: the platform's one way to act on a node (docs/agent.md).

Platform side: what each node should have (`targets.py`, from every capability's
producer), the `/v1/ua/` API, credentials and the status step (`status.py`, run by the
agent's own platform daemon, daemons/status.py). Node side: the runner that pulls the
payload and hands each item to its capability's driver (`<capability>/node.py`).
"""

from appliance.capability import Capability, Daemon

CAPABILITY = Capability(
    name="agent",
    resources="appliance.agent.resources",
    register="appliance.agent:register",
    daemons=(
        # the node agent, on every node (the appliance's own included)
        Daemon("agent"),
        # on the platform: the status of what the agents apply, from their reports
        # (status.py); it has work once a master kind holds a record
        Daemon("status", on_demand_masters=True),
    ),
)


def register(api):
    from .resources import register as register_routes
    register_routes(api)
