"""Delivery daemon: keeps the data plane (`<state-dir>/data-plane/`) in step with the
secret kinds (appliance.secret.delivery). This is its process shell. The status of what
node agents apply (an SSH key with a target among them) is the status daemon's
(daemons/status.py)."""

import sys

from appliance.dataplane import DataPlane
from appliance.secret.delivery import SecretDelivery
from daemons.base import Daemon, run


class Delivery(Daemon):
    name = "delivery"
    tick_seconds = 30.0
    kinds = SecretDelivery.kinds

    def start(self):
        self.secrets = SecretDelivery(self.store, DataPlane(self.settings["state_dir"]),
                                      self.log)
        return super().start()

    def reconcile(self, kind):
        retry_in = self.secrets.reconcile(kind)
        if retry_in is not None:
            self.request_in(kind, retry_in)


def main():
    return run(Delivery)


if __name__ == "__main__":
    sys.exit(main())
