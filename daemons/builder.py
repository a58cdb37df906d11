"""Builder daemon: repositories read into repo elements (appliance.repo.sync), installed
repo elements handed to the Element Manager (appliance.repo.bridge), and elements kept in
their declared state (appliance.em.builder).

It watches every kind a manifest or a repository can touch, so a change is seen within
milliseconds; one iteration is one tick (ITERATION_SECONDS), and every CHECK_EVERY
iterations repositories are checked for a passed next_refresh (spec 2.3 rule 4). A pass
is skipped when no watched kind changed and nothing is due (daemons/base.py, whole pass).
"""

import sys
import time

from appliance.em.builder import ElementBuilder
from appliance.kinds import EM_ELEMENTS, EM_MANIFESTS
from appliance.registry import build_registry
from appliance.repo.bridge import RepoBridge
from appliance.repo.sync import CHECK_EVERY, RepositorySync
from daemons.base import Daemon, run

ITERATION_SECONDS = 1.0


class Builder(Daemon):
    name = "builder"
    kinds = (EM_ELEMENTS, EM_MANIFESTS)
    tick_seconds = ITERATION_SECONDS
    whole_pass = True

    def __init__(self, settings=None, store=None):
        super().__init__(settings, store)
        # the same resources, validation and hooks as the API, used in-process, without
        # the API's routes, Bottle application and middleware (appliance/registry.py)
        self.api = build_registry(self.settings, self.store)
        self.elements = ElementBuilder(self.api, self.log)
        self.repositories = RepositorySync(self.api, self.log)
        self.bridge = RepoBridge(self.api, self.log)
        self.kinds = tuple(self.elements.kinds())
        self._last_periodic = time.monotonic()
        self._refresh_at = None

    def _clocks(self, now):
        """(periodic check due, a repository's next_refresh passed)."""
        return (now - self._last_periodic >= CHECK_EVERY * ITERATION_SECONDS,
                self._refresh_at is not None and now >= self._refresh_at)

    def pass_due(self):
        return any(self._clocks(time.monotonic()))

    def idle_wake_at(self):
        # a repository's next_refresh passing writes nothing: be started again then
        if self._refresh_at is None:
            return None
        return time.time() + max(self._refresh_at - time.monotonic(), 0.0)

    def reconcile_pass(self):
        now = time.monotonic()
        periodic, timer = self._clocks(now)
        if periodic:
            self._last_periodic = now
        wait = self.repositories.reconcile(periodic=periodic or timer)
        self._refresh_at = None if wait is None else time.monotonic() + wait
        self.bridge.reconcile()
        self.elements.reconcile_all()
        self.bridge.reconcile()


def main():
    return run(Builder)


if __name__ == "__main__":
    sys.exit(main())
