"""Password login throttling: a growing delay after failed attempts, per source address
and per username (docs/iam.md, "Login throttling").

Why two keys: the per-address throttle stops one client from guessing at the speed of the
KDF; the per-user throttle stops many addresses from sharing the guessing of one account.
Each key gets `free` failures without a wait; from then on the key waits
`first_delay * 2 ** (failures - free)` seconds (1, 2, 4, ... by default) after its last
failure before the next attempt, up to a bound. A request during the wait is answered 429 with Retry-After before any password is
checked, and is not counted.

Nobody is locked out for good, the last admin included: the per-user wait is bounded and
short (a minute by default), a successful login clears the user's count, failures are
forgotten after a quiet while, and the per-user wait does not apply from an address where
that user logged in successfully before (an attacker's flood for `admin` from elsewhere
does not hold the admin back at home). The per-address wait still applies there: a
shared address (NAT) does not buy an attacker unthrottled guesses.

Usernames are keys whether or not such a user exists, so throttling says nothing about
which users exist. An attempt is counted as a failure when it starts (and uncounted when
it succeeds), so that a burst of parallel guesses cannot all pass before the first fails;
the wait runs from the failure's answer.

State lives in the API process's memory (the API is one process): a restart forgets it.
It is bounded: past MAX_KEYS entries, forgotten ones are dropped first, then the oldest;
usernames are kept as 16-byte digests, whatever their length.
"""

import hashlib
import math
import threading
import time

MAX_KEYS = 100_000


def _user_key(username):
    """A fixed-size key: a username sent may be as long as a body, and the table holds
    many of them."""
    return hashlib.blake2b(username.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Throttled(Exception):
    def __init__(self, retry_after):
        super().__init__(f"retry after {retry_after} s")
        self.retry_after = retry_after


class _Counts:
    """failures and the time of the last one, per key."""

    def __init__(self, free, first_delay, max_delay, memory):
        self.free, self.first_delay = free, first_delay
        self.max_delay, self.memory = max_delay, memory
        self.entries = {}           # key -> [failures, time of the last]

    def delay(self, failures):
        """The wait after `failures` failures: none for the first `free`, then
        first_delay doubling up to max_delay."""
        extra = failures - self.free
        if extra < 0:
            return 0.0
        # the exponent is capped so that a huge count cannot overflow the float
        return min(self.first_delay * 2.0 ** min(extra, 64), self.max_delay)

    def wait(self, key, now):
        entry = self.entries.get(key)
        if entry is None:
            return 0.0
        failures, last = entry
        if now - last >= self.memory:
            del self.entries[key]
            return 0.0
        return max(0.0, last + self.delay(failures) - now)

    def fail(self, key, now):
        entry = self.entries.get(key)
        if entry is None:
            self._make_room(now)
            self.entries[key] = [1, now]
        else:
            entry[0] += 1
            entry[1] = now

    def touch(self, key, now):
        entry = self.entries.get(key)
        if entry is not None:
            entry[1] = now

    def undo(self, key):
        entry = self.entries.get(key)
        if entry is not None:
            entry[0] -= 1
            if entry[0] <= 0:
                del self.entries[key]

    def clear(self, key):
        self.entries.pop(key, None)

    def _make_room(self, now):
        if len(self.entries) < MAX_KEYS:
            return
        for key in [k for k, (_, last) in self.entries.items() if now - last >= self.memory]:
            del self.entries[key]
        if len(self.entries) >= MAX_KEYS:
            oldest = sorted(self.entries, key=lambda k: self.entries[k][1])
            for key in oldest[:len(self.entries) - MAX_KEYS + 1]:
                del self.entries[key]


class LoginThrottle:
    def __init__(self, settings, clock=time.monotonic):
        memory = float(settings["login_failure_memory"])
        first = float(settings["login_first_delay"])
        self.addresses = _Counts(int(settings["login_free_failures_address"]), first,
                                 float(settings["login_max_delay_address"]), memory)
        self.users = _Counts(int(settings["login_free_failures_user"]), first,
                             float(settings["login_max_delay_user"]), memory)
        # (username, address) -> time of the last successful login from there
        self.known = {}
        self.memory_known = memory * 24
        self.clock = clock
        self._lock = threading.Lock()

    def begin(self, username, address):
        """Before the password is checked: raises Throttled while either key must wait,
        else counts the attempt as a failure until `succeeded` says otherwise."""
        username = _user_key(username)
        with self._lock:
            now = self.clock()
            waits = [self.addresses.wait(address, now)]
            if not self._is_known(username, address, now):
                waits.append(self.users.wait(username, now))
            wait = max(waits)
            if wait > 0:
                raise Throttled(max(1, math.ceil(wait)))
            self.addresses.fail(address, now)
            self.users.fail(username, now)

    def failed(self, username, address):
        """The attempt did fail: its wait runs from now, when the answer leaves (the
        password check may have taken a while)."""
        username = _user_key(username)
        with self._lock:
            now = self.clock()
            self.addresses.touch(address, now)
            self.users.touch(username, now)

    def succeeded(self, username, address):
        username = _user_key(username)
        with self._lock:
            self.addresses.undo(address)
            self.users.clear(username)
            if len(self.known) >= MAX_KEYS:
                oldest = min(self.known, key=self.known.get)
                del self.known[oldest]
            self.known[(username, address)] = self.clock()

    def _is_known(self, username, address, now):
        since = self.known.get((username, address))
        if since is None:
            return False
        if now - since >= self.memory_known:
            del self.known[(username, address)]
            return False
        return True
