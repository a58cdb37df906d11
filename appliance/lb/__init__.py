"""Load balancers: the API (resources), what each node gets (targets), and nginx on the node (nginx, node)."""

from appliance.capability import Capability, NodeSets, Target
from appliance.kinds import SECRET_CERTIFICATES

CAPABILITY = Capability(
    name="lb",
    resources="appliance.lb.resources",
    register="appliance.lb.resources:register",
    targets=(Target("lb", producer="appliance.lb.targets:for_node",
                    driver="appliance.lb.node:Driver", master="network_lb",
                    unplaced="appliance.lb.placement:unplaced",
                    # its vhosts, routes and pools, and the certificates its vhosts serve
                    reads=("network_lb_vhosts", "network_lb_routes",
                           "network_lb_backend_pools", SECRET_CERTIFICATES)),),
    settings={
        # the address the node's LB nginx listens on (docs/lb-dataplane.md): "" is every
        # address; several test "nodes" on one host each take their own 127.0.0.x
        "agent_lb_listen": "",
        # seconds between two readings of the LB nginx's stub_status by the agent, each
        # reported (docs/metrics-infra.md)
        "agent_lb_stats_seconds": 30.0,
        # load balancers (docs/lb.md): the image an LB of type core boots its nodes from (the
        # node image's URL, or file:// on the appliance); unset: type core is refused
        "lb_image": None,
    },
    # the node sets of LBs of type core (appliance/lb/reconcile.py)
    node_sets=(NodeSets("appliance.lb.reconcile:reconcile_lb_sets", watches=("network_lb",)),),
)
