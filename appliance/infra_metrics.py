"""What the infrastructure metric families share (docs/metrics-infra.md): per-resource
gauge families, declared alike and published one round at a time, whose resources that
are gone since the last round leave it, and the one counter of failed collections.

Each family is defined in the capability module of the process that knows its numbers
(the compute daemon, the sqldb daemon, the DNS server); prometheus_client's multiprocess
mode lets GET /metrics gather them. Collection must never fail or slow down the pass that
calls it: every round is guarded, and a failure only counts here and logs once a minute.

prometheus_client does not remove a label set from its multiprocess files (remove() only
forgets it in the process). So a resource that is gone is first set to NaN, which a graph
shows as a gap rather than as its last value frozen, and then forgotten in the process; its
file entry goes when the process ends.
"""

import logging
import math
import os
import time
import warnings

from appliance.metrics import Counter, Gauge

log = logging.getLogger("appliance.metrics")
# one process publishes each per-resource family: its latest value, while it lives (a dead
# process's values do not linger)
MODE = "livemostrecent"

COLLECTION_ERRORS = Counter(
    "appliance_infra_collection_errors",
    "Infrastructure metric collections that failed (the pass that called them went on).",
    ["family"])

_last_logged = {}


def _multiprocess():
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR")
                or os.environ.get("prometheus_multiproc_dir"))


def guarded(family, collect, *args, **kwargs):
    """collect(*args, **kwargs), or None when it raised: counted under `family`, logged
    at most once a minute per family. Never raises."""
    try:
        return collect(*args, **kwargs)
    except Exception:
        try:
            COLLECTION_ERRORS.labels(family).inc()
            now = time.monotonic()
            if now - _last_logged.get(family, -1e9) >= 60.0:
                _last_logged[family] = now
                log.exception("collecting the %s metrics failed", family)
        except Exception:       # logging itself must not break the pass either
            pass
        return None


def resource_gauge(name, documentation, labels):
    """A gauge family of per-resource samples, published by one process through a
    ResourceGauges."""
    return Gauge(name, documentation, labels, multiprocess_mode=MODE)


class ResourceGauges:
    """Gauges whose label sets are the resources of one round: publish() sets every
    value given and drops the label sets of the previous round that it does not name."""

    def __init__(self, *gauges):
        self.gauges = gauges
        self._last = {g: set() for g in gauges}

    def empty(self):
        """A round's values to fill for publish(): {gauge: {}} for each gauge."""
        return {g: {} for g in self.gauges}

    def publish(self, values):
        """values: {gauge: {label values tuple: number}}."""
        for gauge in self.gauges:
            series = values.get(gauge) or {}
            for labels, value in series.items():
                gauge.labels(*labels).set(value)
            now = {tuple(str(v) for v in labels) for labels in series}
            for labels in self._last[gauge] - now:
                self._forget(gauge, labels)
            self._last[gauge] = now

    @staticmethod
    def _forget(gauge, labels):
        if _multiprocess():
            gauge.labels(*labels).set(math.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # "not implemented in multi-process mode"
            gauge.remove(*labels)
