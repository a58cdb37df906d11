"""The node side of a monopoly service's lease (docs/services.md, "Monopoly").

The lease is granted by the API (`POST /v1/em/services/<uuid>/actions/lease/invoke`) for
`seconds`. The node counts it on its own monotonic clock from the moment it sent the
request, so a lease never looks longer here than it is on the server, whatever the two
clocks say. It renews every third of the lease. When it cannot renew, it gives the lease
up at two thirds: the last third is the time its unit has to stop before another node may
take over (self-fencing). A node that does not hold the lease asks again every second
(at most three times per lease), so it takes over within about a second of the expiry.
"""

import time


class Lease:
    def __init__(self, service, node):
        self.service, self.node = service, node
        self.until = None           # local clock: the lease is ours before this
        self.seconds = None
        self.next_ask = 0.0
        self.holder = None          # the holder the API named last (None: no answer)

    def holding(self, now):
        return self.until is not None and now < self.fence_at()

    def fence_at(self):
        return self.until - self.seconds / 3


class Leases:
    def __init__(self, api, node, clock=time.monotonic, log=None):
        self.api, self.node, self.clock, self.log = api, node, clock, log
        self.leases = {}

    def get(self, service):
        lease = self.leases.get(service)
        if lease is None:
            lease = self.leases[service] = Lease(service, self.node)
        return lease

    def drop(self, service):
        self.leases.pop(service, None)

    def due(self, service):
        return self.clock() >= self.get(service).next_ask

    def ask(self, service):
        """Take or renew the lease now; True while this node holds it."""
        lease = self.get(service)
        sent = self.clock()
        try:
            status, body = self.api.post(f"/v1/em/services/{service}/actions/lease/invoke",
                                         {"node": self.node})
        except Exception as e:      # noqa: BLE001 - any failure is "no answer"
            # the agent's client raises its own errors (Unreachable, Refused on a token
            # that cannot be had); whatever it is, the lease was not renewed
            status, body = None, f"{type(e).__name__}: {e}"
        if status == 200 and isinstance(body, dict):
            seconds = float(body.get("seconds") or 10.0)
            lease.seconds = seconds
            lease.holder = body.get("holder")
            if body.get("granted"):
                lease.until = sent + seconds
                lease.next_ask = sent + seconds / 3
            else:
                lease.until = None
                lease.next_ask = sent + min(1.0, seconds / 3)
        elif status is not None and 400 <= status < 500:
            # the API refuses (the service is gone, or no longer targets this node)
            lease.until = lease.holder = None
            lease.next_ask = sent + 1.0
        else:
            # no answer: keep what we hold until it must be given up, and try again soon
            if self.log is not None:
                self.log.warning("lease of service %s: no answer (%s %s)", service, status,
                                 body)
            lease.next_ask = sent + 1.0
        return lease.holding(self.clock())

    def holding(self, service):
        return self.get(service).holding(self.clock())

    def remaining(self, service):
        """Seconds left before this node must have given the lease up (0 or less: it
        does not hold it)."""
        lease = self.get(service)
        return lease.fence_at() - self.clock() if lease.until is not None else 0.0
