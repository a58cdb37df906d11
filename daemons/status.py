"""Status daemon: writes the status of the resources that node agents apply (configs,
services, SSH keys with a target, LBs: every master kind of the capabilities' targets)
from what the agents report. The step is the agent capability's
(appliance/agent/status.py); this is its process shell.

A process of its own, not a step of another daemon: the status of configs is the agent's
business, and this process imports only what the step needs (no API framework,
tests/supervisor/test_imports.py). It starts on demand, at the first write to a master
kind (docs/on-demand-daemons.md): before any master record exists it has nothing to write.
"""

import sys

from appliance.agent import capabilities, status
from appliance.agent.targets import View
from daemons.base import Daemon, run

# not a store kind: the name under which every change that can move an agent-applied
# resource's status is coalesced into one aggregation of all master kinds
AGENT_STATUS = "agent status"


class AgentStatus(Daemon):
    name = "status"
    tick_seconds = 30.0

    @property
    def kinds(self):
        # at start, not at import: a capability registered late (a test's) is watched too
        return status.watched_kinds()

    def reconcile(self, kind):
        if kind == AGENT_STATUS:
            for master_kind in capabilities.MASTERS.values():
                # with the settings, as the API's payload has them: an item's value may
                # depend on one (an LB's address rule, a DBaaS port), and so its hash
                status.aggregate(self.store, master_kind,
                                 View(self.store, settings=self.settings))
            return
        if kind in status.watched_kinds():
            self.request(AGENT_STATUS)


def main():
    return run(AgentStatus)


if __name__ == "__main__":
    sys.exit(main())
