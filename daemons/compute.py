"""Compute daemon: keeps libvirt's domains, volumes and networks in line with the compute
and network kinds. The logic is appliance.compute.reconcile; this is its process shell.
Named "compute" rather than "libvirt" so that the module never shadows the libvirt package.

Every watched kind leads to the same whole pass (`Reconciler.pass_once`); a pass is skipped
when none of the kinds moved since the last one and libvirt reported nothing, except on
the periodic tick, which always runs one (changes made behind our back in libvirt): the
whole-pass mode of daemons/base.py, with libvirt's events and the tick as `pass_due`.
"""

import sys
import threading

from appliance.compute.reconcile import Reconciler
from appliance.compute.stats import ComputeStats
from daemons.base import PASS, Daemon, run


class Compute(Daemon):
    name = "compute"
    kinds = Reconciler.kinds
    tick_seconds = 30.0
    whole_pass = True
    connect = None          # libvirt's open by default; a bench shares one test:/// connection

    def start(self):
        self._forced = threading.Event()
        self.reconciler = Reconciler(self.store, self.settings, connect=self.connect,
                                     on_change=self._libvirt_changed)
        self.reconciler.start_events()
        self.stats = ComputeStats(self.store, self.settings)
        return super().start()

    def schedule_jobs(self, scheduler):
        scheduler.every(self.tick_seconds).seconds.do(self._libvirt_changed)
        # the metrics' readings go through the worker's queue (a pass), not the
        # job itself: jobs run under the daemon's wake lock, which libvirt's event thread
        # takes too (on_change)
        scheduler.every(self.stats.every).seconds.do(self.request, PASS)

    def _libvirt_changed(self):
        self._forced.set()
        self.request(PASS)

    def pass_due(self):
        # the VMs' readings are due too (docs/metrics-infra.md); a pass over converged
        # nodes writes nothing and costs little
        return self._forced.is_set() or self.stats.vms_due()

    def reconcile_pass(self):
        self._forced.clear()
        self.reconciler.pass_once()
        self.stats.after_pass(self.reconciler)      # VMs: at most every stats.every


def main():
    return run(Compute)


if __name__ == "__main__":
    sys.exit(main())
