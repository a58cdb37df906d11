"""The payload long poll: an agent's request waits in the API until a store change makes
its payload differ from the hash it has (docs/agent.md, "Long poll").

One change watch per API process (state.ChangeWatch: inotify on the kinds' lock files, so
a write by any process wakes the waiters within milliseconds) bumps a generation counter.
On a thread, each waiter recomputes its own payload when the generation moves. On the
loop, one refresh pass per move computes each waiting node's payload once (its polls
share it) in bounded batches off the loop, and answers the polls whose hash it changes:
1,000 polls cost 1,000 payloads of Python, not 1,000 executor jobs and their wake-ups.
A payload is only ever given to polls that had seen no newer generation than the one it
was computed after (`_Waiter.seen`), so a change during a computation is never hidden.

A poll handed to the API's event loop (appliance/api/longlived.py, the API's own Waitress
server) holds no thread: at most `loop_limit` (agent_max_polls) of those wait at once. A
poll on a server without the hand-over holds its thread, so at most `limit` of those wait:
the rest of the API always keeps `api_threads - limit` threads. A poll over its cap is
answered at once with `Retry-After`, and the agent polls again a moment later.
"""

import asyncio
import logging
import threading
import time

from appliance.kinds import EM_SERVICE_LEASES, IAM_REVOKED_SESSIONS

log = logging.getLogger("appliance.agent.poll")

# kinds whose writes never change a payload, some of them often (the agents' own reports,
# the monopoly leases renewed every few seconds): a wake-up for each would make every
# waiter recompute its payload for nothing. A new agent polls afresh anyway.
NOT_WATCHED = {"ua_resources", "ua_enrollments", "ua_agents", "ua_target_resources",
               EM_SERVICE_LEASES, IAM_REVOKED_SESSIONS}


# nodes whose payloads one executor job computes in a row: large enough that 1,000 polls
# cost a few dozen jobs, small enough that the first answers leave early and that a stop
# is noticed between two batches
REFRESH_BATCH = 64


class _Waiter:
    """A poll parked on the loop (loop thread only)."""
    __slots__ = ("key", "compute", "known_hash", "seen", "body", "answer")

    def __init__(self, key, compute, known_hash, seen, body, answer):
        self.key = key                  # what its payload depends on: the agent's node
        self.compute = compute
        self.known_hash = known_hash
        self.seen = seen                # the generation its last payload was computed after
        self.body = body                # that payload (the answer when its wait runs out)
        self.answer = answer            # a Future: the body that differs, or the error


def _compute_batch(jobs):
    """On an executor thread: [(key, compute)] -> [(key, (hash, body) or None, error)]."""
    out = []
    for key, compute in jobs:
        try:
            out.append((key, compute(), None))
        except Exception as error:      # noqa: BLE001 (each poll of the node gets it)
            out.append((key, None, error))
    return out


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
        self._waiters = set()               # _Waiter parked on the loop (loop thread only)
        self._refreshing = None             # the refresh pass's task (loop thread only)
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
        # on the loop thread: one refresh pass at a time; a running one sees a stop before
        # its next batch and a newer generation when its pass ends
        if self._refreshing is None and self._waiters:
            self._refreshing = asyncio.ensure_future(self._refresh())

    async def _refresh(self):
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                if self._watch is None:         # stopped: each answers what it has
                    for waiter in self._waiters:
                        if not waiter.answer.done():
                            waiter.answer.set_result(waiter.body)
                    return
                generation = self.generation
                # the polls of one node share one computation (a poll of an agent that
                # reconnected, or many of one agent)
                by_key = {}
                for waiter in self._waiters:
                    if waiter.seen < generation and not waiter.answer.done():
                        by_key.setdefault(waiter.key, []).append(waiter)
                if not by_key:
                    return
                keys = list(by_key)
                for start in range(0, len(keys), REFRESH_BATCH):
                    # a newer change does not cut the pass short (under steady writes its
                    # first batch would be all that is ever computed): it gets a pass of
                    # its own after this one
                    if self._watch is None:
                        break
                    jobs = [(key, by_key[key][0].compute)
                            for key in keys[start:start + REFRESH_BATCH]]
                    # the store's reads, off the loop: it keeps serving the other connections
                    try:
                        results = await loop.run_in_executor(None, _compute_batch, jobs)
                    except RuntimeError:        # the executor shut down: the loop stops
                        log.warning("payload refresh stopped: the loop is stopping")
                        return
                    for key, result, error in results:
                        for waiter in by_key[key]:
                            if waiter.answer.done():
                                continue
                            if error is not None:
                                waiter.answer.set_exception(error)
                                continue
                            # computed after `generation`, which each of them has seen
                            waiter.seen = generation
                            current, body = result
                            if current != waiter.known_hash:
                                waiter.answer.set_result(body)
                            else:
                                waiter.body = body
        finally:
            self._refreshing = None

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

    def park(self, compute, known_hash, seconds, key=None):
        """On a request thread that may hand over: compute once; when the payload already
        differs, or there is no wait, or the loop's cap is reached, return (body, waited)
        to answer at once, else (None, wait) where wait(gone) is the coroutine that waits
        on the loop and returns the body. Polls of one `key` (the agent's node: what
        compute() depends on) share each recomputation on the loop; None shares none."""
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
                return await self._wait_on_loop(compute, key if key is not None else object(),
                                                known_hash, seconds, generation, body, gone)
            finally:
                with self._cond:
                    self.waiting -= 1
        return None, wait

    async def _wait_on_loop(self, compute, key, known_hash, seconds, generation, body,
                            gone):
        loop = asyncio.get_running_loop()
        waiter = _Waiter(key, compute, known_hash, generation, body, loop.create_future())
        self._waiters.add(waiter)
        closed = asyncio.ensure_future(gone.wait())
        try:
            # a change (or the stop) between the first computation and now, whose wake-up
            # this waiter missed
            if self.generation != generation or self._watch is None:
                self._wake_loop()
            await asyncio.wait((waiter.answer, closed), timeout=seconds,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            self._waiters.discard(waiter)
        if waiter.answer.done():
            return waiter.answer.result()       # the error of the computation raises
        waiter.answer.cancel()
        return waiter.body

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
