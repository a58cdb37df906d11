"""Services (`/v1/em/services/`): commands run as systemd units on the nodes a service
targets, with a monopoly lease for the kinds that must run on one node at a time
(docs/services.md).

Platform side: `resources.py` (API, actions, the lease), `targets.py` (the producer).
Node side: `unit.py` (pure rendering), `node.py` (the systemd driver), `lease.py`.
"""

from appliance.capability import Capability, Target

CAPABILITY = Capability(
    name="service",
    resources="appliance.service.resources",
    register="appliance.service:register",
    targets=(Target("service", producer="appliance.service.targets:for_node",
                    driver="appliance.service.node:Driver", master="em_services"),),
)


def register(api):
    # Imported here: a node's agent imports this package's node-side modules without the API.
    from .resources import all_resources
    for resource in all_resources():
        resource.register(api)
