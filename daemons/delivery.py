"""Delivery daemon: keeps the data plane (`<state-dir>/data-plane/`) in step with the
secret kinds. The logic is appliance.secret.delivery; this is its process shell."""

import sys

from appliance.dataplane import DataPlane
from appliance.secret.delivery import SecretDelivery
from daemons.base import Daemon, run


class Delivery(Daemon):
    name = "delivery"
    kinds = SecretDelivery.kinds
    tick_seconds = 30.0

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
