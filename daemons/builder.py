"""Builder daemon: keeps installed elements in their declared state (appliance.em.builder).
It watches every kind a manifest can create, so a change behind an element's back, or a
value a consumer waits for, is seen within milliseconds."""

import sys

from appliance.api.app import build_api
from appliance.em.builder import ElementBuilder
from daemons.base import Daemon, run


class Builder(Daemon):
    name = "builder"
    kinds = ("em_elements", "em_manifests")
    tick_seconds = 10.0

    def __init__(self, settings=None, store=None):
        super().__init__(settings, store)
        # the same resources, validation and hooks as the API, used in-process
        self.api = build_api(self.settings, self.store)
        self.elements = ElementBuilder(self.api, self.log)
        self.kinds = tuple(self.elements.kinds())

    def reconcile(self, kind):
        self.elements.reconcile_all()


if __name__ == "__main__":
    sys.exit(run(Builder))
