"""The payload long poll: an agent's request waits in the API until a store change makes
its payload differ from the hash it has (docs/agent.md, "Long poll").

One change watch per API process (state.ChangeWatch: inotify on the kinds' lock files, so
a write by any process wakes the waiters within milliseconds) bumps a generation counter;
each waiter recomputes its own payload when the generation moves.

A poll handed to the API's event loop (appliance/api/longlived.py, the API's own Waitress
server) holds no thread: at most `loop_limit` (agent_max_polls) of those wait at once. A
poll on a server without the hand-over holds its thread, so at most `limit` of those wait:
the rest of the API always keeps `api_threads - limit` threads. A poll over its cap is
answered at once with `Retry-After`, and the agent polls again a moment later.
"""

import asyncio
import threading
import time

from appliance.kinds import EM_SERVICE_LEASES, IAM_REVOKED_SESSIONS

# kinds whose writes never change a payload, some of them often (the agents' own reports,
# the monopoly leases renewed every few seconds): a wake-up for each would make every
# waiter recompute its payload for nothing. A new agent polls afresh anyway.
NOT_WATCHED = {"ua_resources", "ua_enrollments", "ua_agents", "ua_target_resources",
               EM_SERVICE_LEASES, IAM_REVOKED_SESSIONS}


def poll_limit(settings):
    """How many long polls may wait at once: the share of the API's threads they may
    hold, always leaving one for everything else."""
    threads = settings["api_threads"]
    return max(0, min(threads - 1, int(threads * settings["agent_poll_share"])))


class PayloadHub:
    def __init__(self, store, kinds, limit, rescan_seconds=5.0, loop_limit=10000,
                 eventloop=None):
        self.store = store
        self._kinds = kinds                 # () -> the kinds to watch (asked at first use)
        self.limit = limit
        self.loop_limit = loop_limit
        self.eventloop = eventloop
        self._changed_event = None          # the loop's waiters wait on it (loop thread only)
        self.rescan_seconds = rescan_seconds
        self.generation = 0
        self.waiting = 0
        self._cond = threading.Condition()
        self._watch = None
        self._start_lock = threading.Lock()
        # sticky: a poll that reaches a stopping API answers at once and starts no new
        # watch (it would keep answering from the store after the API's stop)
        self._stopped = False

    def _changed(self, kind):
        with self._cond:
            self.generation += 1
            self._cond.notify_all()
        if self.eventloop is not None:
            self.eventloop.call_soon(self._wake_loop)

    def _wake_loop(self):
        event, self._changed_event = self._changed_event, None
        if event is not None:
            event.set()

    def _loop_event(self):
        if self._changed_event is None:
            self._changed_event = asyncio.Event()
        return self._changed_event

    def _started(self):
        # started on the first poll that waits, not with the API: a process that never
        # serves an agent (tests, the CLI's in-process uses) runs no watch threads
        with self._start_lock:
            if self._watch is None and not self._stopped:
                # imported here: an API that serves no agent never loads watchdog (memory)
                from state.watch import ChangeWatch  # noqa: PLC0415
                watch = ChangeWatch(self.store, self.rescan_seconds)
                for kind in sorted(set(self._kinds()) - NOT_WATCHED):
                    watch.subscribe(kind, self._changed)
                self._watch = watch.start()

    def stop(self):
        with self._start_lock:
            self._stopped = True
            if self._watch is not None:
                self._watch.stop()
                self._watch = None
        with self._cond:
            self._cond.notify_all()
        if self.eventloop is not None:
            self.eventloop.call_soon(self._wake_loop)

    def park(self, compute, known_hash, seconds):
        """On a request thread that may hand over: compute once; when the payload already
        differs, or there is no wait, or the loop's cap is reached, return (body, waited)
        to answer at once, else (None, wait) where wait(gone) is the coroutine that waits
        on the loop and returns the body."""
        if seconds > 0:
            self._started()
        generation = self.generation
        current, body = compute()
        if current != known_hash or seconds <= 0 or self._stopped:
            return (body, True), None
        with self._cond:
            if self.waiting >= self.loop_limit:
                return (body, False), None
            self.waiting += 1

        async def wait(gone):
            try:
                return await self._wait_on_loop(compute, known_hash, seconds, generation,
                                                body, gone)
            finally:
                with self._cond:
                    self.waiting -= 1
        return None, wait

    async def _wait_on_loop(self, compute, known_hash, seconds, generation, body, gone):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            while self.generation == generation and self._watch is not None:
                left = deadline - loop.time()
                if left <= 0 or gone.is_set():
                    return body
                changed = asyncio.ensure_future(self._loop_event().wait())
                closed = asyncio.ensure_future(gone.wait())
                try:
                    await asyncio.wait((changed, closed), timeout=left,
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
                    closed.cancel()
            if self._watch is None:             # stopped: answer what we have
                return body
            generation = self.generation
            # the store's reads, off the loop: it keeps serving the other connections
            current, body = await loop.run_in_executor(None, compute)
            if current != known_hash:
                return body

    def wait_for(self, compute, known_hash, seconds):
        """compute() -> (hash, body). Returns (body, waited): at once when the hash differs
        from known_hash, else when a change makes it differ or `seconds` run out.
        waited is False when the poll could not wait (over the limit)."""
        if seconds > 0:
            self._started()
        generation = self.generation
        current, body = compute()
        if current != known_hash or seconds <= 0 or self._stopped:
            return body, True
        with self._cond:
            if self.waiting >= self.limit:
                return body, False
            self.waiting += 1
        try:
            deadline = time.monotonic() + seconds
            while True:
                with self._cond:
                    while self.generation == generation and self._watch is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return body, True
                        self._cond.wait(left)
                    if self._watch is None:         # stopped: answer what we have
                        return body, True
                    generation = self.generation
                current, body = compute()
                if current != known_hash:
                    return body, True
        finally:
            with self._cond:
                self.waiting -= 1
