"""The platform-side step of LBs of type `core`: each one's node set `lbaas-<name>` made,
resized and deleted (docs/lb.md, "Type core"). The compute daemon runs it at the start of
its pass, just before the sets' own step gives the set its members, so an LB's nodes
come in the same pass.

The set is an ordinary set of the admin project whose uuid is the LB's and whose hidden
field `lb` names it; everything else about its nodes (placement, seed, agent enrollment,
rolling update) is compute's.
"""

from appliance.compute.owned_sets import delete_owned, reconcile_owned

from . import metrics, placement

LBS = "network_lb"


def delete_set(store, lb_uuid):
    """The LB's set and its members, gone; returns how many records went."""
    return delete_owned(store, "lb", lb_uuid)


def reconcile_lb_sets(store, settings):
    """One pass; returns the number of records written."""
    metrics.publish(store)      # the LB nginx numbers the agents reported (never raises)
    image = settings.get("lb_image")
    wanted = {lb["uuid"]: lb for lb in store.collection(LBS).records()
              if (lb.get("type") or {}).get("kind") == "core"}
    # without an image the LB's status says it waits for its set
    return reconcile_owned(store, "lb", wanted,
                           lambda lb, current: placement.node_set(lb, image) if image else None)
