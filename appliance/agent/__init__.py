"""The node agent: the platform's one way to act on a node (docs/agent.md).

Platform side: what each node should have (`targets.py`, from every capability's
producer), the `/v1/ua/` API, credentials and the status step. Node side: the runner that
pulls the payload and hands each item to its capability's driver (`<capability>/node.py`).
"""

from appliance.capability import Capability, Daemon

CAPABILITY = Capability(
    name="agent",
    resources="appliance.agent.resources",
    register="appliance.agent:register",
    # the node agent, on every node (the appliance's own included)
    daemons=(Daemon("agent"),),
)


def register(api):
    from .resources import register as register_routes
    register_routes(api)
