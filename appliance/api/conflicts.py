"""Compare-and-set conflicts are the server's own business: they are retried here.

A handler reads a record, decides, and writes it back only if its revision has not moved
(`expect_revision`). When a daemon or another request wrote in between, the store raises
`RevisionConflict`. No client caused that, so no client may see it: the whole handler runs
again on fresh records, after a short random pause (full jitter, doubling) so that writers
that collided do not collide again in step. The attempts are bounded; a record that keeps
moving for that long gives 503 with `Retry-After`, never 409 (409 is kept for conflicts a
client causes: a duplicate key, dependents, an element already installed).

A handler is re-run only if it has written nothing before its conflict: re-running one
that did would write that first part twice. Every handler today writes with a
compare-and-set first and without one afterwards; the store's per-thread write count
(`state.writes_in_thread`) keeps that true rather than assumed.

A partial update (PUT) cannot be starved: its last attempt holds the kind's lock (see
`Resource.update_record`), so a writer that never pauses delays it but cannot refuse it.
"""

import logging
import random
import time

import state

from .errors import ApiError

log = logging.getLogger("appliance.api")

ATTEMPTS = 10
FIRST_PAUSE = 0.005         # seconds; doubles per attempt
LONGEST_PAUSE = 0.2         # the worst case of all the pauses together stays under 1 s


class Busy(ApiError):
    status, type = 503, "ServiceUnavailable"

    def __init__(self, message):
        super().__init__(message, headers={"Retry-After": "1"})


def retry_conflicts(run, attempts=ATTEMPTS, sleep=time.sleep, last_under=None):
    """`run()`, again while it fails on a revision conflict before writing anything.

    `last_under`, the lock of the kind that `run` writes, makes the last attempt hold it:
    no writer can then get in between, so that attempt cannot conflict. Only work that
    writes no other kind before that write may take it (a lock held across two kinds
    could deadlock with a process taking them in the other order)."""
    for attempt in range(attempts):
        written = state.writes_in_thread()
        last = attempt == attempts - 1
        try:
            if last and last_under is not None:
                with last_under:
                    return run()
            return run()
        except state.RevisionConflict as e:
            if state.writes_in_thread() != written:
                log.error("conflict after a partial write, not retried: %s", e)
                raise Busy(f"{e.kind} {e.uuid} changed while this request was written; "
                           "read it again and retry") from None
            if last:
                log.warning("conflict persisted over %d attempts: %s", attempts, e)
                raise Busy(f"{e.kind} {e.uuid} keeps changing; retry shortly") from None
            log.debug("retrying after a conflict (attempt %d): %s", attempt + 1, e)
            sleep(random.uniform(0, min(LONGEST_PAUSE, FIRST_PAUSE * 2 ** attempt)))
