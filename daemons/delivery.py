"""Delivery daemon: keeps the data plane (`<state-dir>/data-plane/`) in step with the
secret kinds (appliance.secret.delivery), and writes the status of the resources that node
agents apply (appliance.agent.status). This is their process shell."""

import sys

from appliance.agent import capabilities, status
from appliance.agent.targets import View
from appliance.dataplane import DataPlane
from appliance.secret.delivery import SecretDelivery
from daemons.base import Daemon, run

# not a store kind: the name under which every change that can move an agent-applied
# resource's status is coalesced into one aggregation of all master kinds
AGENT_STATUS = "agent status"


class Delivery(Daemon):
    name = "delivery"
    tick_seconds = 30.0

    @property
    def kinds(self):
        # at start, not at import: a capability registered late (a test's) is watched too
        return tuple(dict.fromkeys(SecretDelivery.kinds + status.watched_kinds()))

    def start(self):
        self.secrets = SecretDelivery(self.store, DataPlane(self.settings["state_dir"]),
                                      self.log)
        return super().start()

    def reconcile(self, kind):
        if kind == AGENT_STATUS:
            for master_kind in capabilities.MASTERS.values():
                # with the settings, as the API's payload has them: an item's value may
                # depend on one (an LB's address rule, a DBaaS port), and so its hash
                status.aggregate(self.store, master_kind,
                                 View(self.store, settings=self.settings))
            return
        if kind in SecretDelivery.kinds:
            retry_in = self.secrets.reconcile(kind)
            if retry_in is not None:
                self.request_in(kind, retry_in)
        if kind in status.watched_kinds():
            self.request(AGENT_STATUS)


def main():
    return run(Delivery)


if __name__ == "__main__":
    sys.exit(main())
