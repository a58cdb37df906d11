"""A config's status life cycle as its writers follow it: NEW after every write (the API's
create and PUT), then the status step's (appliance/agent/status.py: IN_PROGRESS, ACTIVE or
ERROR, with each node's judgement in `node_status`). Kept apart from resources.py, as
secret/kinds.py is for secrets: the rule is the capability's, not the HTTP mapping's, and a
writer other than the API (none today) follows it without loading the API framework.
"""

STATUSES = ("NEW", "IN_PROGRESS", "ACTIVE", "ERROR")
# a write of a config is not delivered yet: NEW until the status step judges it again
UNDELIVERED = {"status": "NEW", "status_reason": None}


def new_config():
    """The status fields of a new config: NEW, judged on no node yet."""
    return {**UNDELIVERED, "node_status": {}}


def rewritten(changes):
    """`changes` (a PUT's) with the status back to NEW."""
    changes.update(UNDELIVERED)
    return changes
