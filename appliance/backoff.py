"""Exponential back-off per key: the one implementation (docs/node-toolbox.md).

Something that failed is tried again after `first` seconds, then twice as long after each
further failure, up to `cap`; a success forgets the key. A key that keeps failing thus
costs a bounded number of tries per hour and can never spin, and one failing key does not
hold back the others. The clock is monotonic (a wall-clock step changes no wait).
"""

import time


class Backoff:
    def __init__(self, first, cap, clock=time.monotonic):
        self.first, self.cap, self.clock = first, cap, clock
        self._delay = {}    # key -> length of the wait after its last failure
        self._until = {}    # key -> clock time before which it is not tried

    def failed(self, key):
        """Note a failure of `key`; returns the seconds to wait before the next try."""
        previous = self._delay.get(key)
        delay = self.first if previous is None else min(previous * 2, self.cap)
        self._delay[key] = delay
        self._until[key] = self.clock() + delay
        return delay

    def resume(self, key, delay):
        """Go on from a wait that an earlier process (which forgot it: a daemon started
        again) used after `key`'s last failure: its next failure waits twice as long (up
        to `cap`). A wait shorter than `first` is no back-off to go on from (it was cut
        short: the next failure waits `first`)."""
        if delay >= self.first:
            self._delay[key] = min(delay, self.cap)

    def succeeded(self, key):
        self._delay.pop(key, None)
        self._until.pop(key, None)

    def forget(self, key):
        self.succeeded(key)

    def until(self, key):
        """The clock time from which `key` may be tried (0.0: now)."""
        return self._until.get(key, 0.0)

    def ready(self, key):
        return self.clock() >= self._until.get(key, 0.0)

    def failing(self, key):
        return key in self._delay

    def keys(self):
        return list(self._delay)
