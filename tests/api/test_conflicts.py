"""Internal compare-and-set conflicts are retried in the server and never reach a client."""

import logging
import threading
import uuid

import pytest

from appliance.api import conflicts
from appliance.iam.builtin import ADMIN_PROJECT
from state import RevisionConflict, Store

W = "/v1/test/widgets"


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path))
    yield s
    s.close()


def no_pause(_seconds):
    pass


# ---- the retry itself, over a real store ----------------------------------------------

def test_a_conflict_runs_the_whole_work_again_on_fresh_records(store):
    things = store.collection("things")
    thing = things.insert({"n": 0})
    runs = []

    def work():
        current = things.require(thing["uuid"])
        runs.append(current["revision"])
        if len(runs) < 3:
            # another writer lands between this read and its write; it is another thread,
            # as a daemon is another process (a write of the work's own forbids the retry)
            other = threading.Thread(target=things.update,
                                     args=(thing["uuid"], {"other": len(runs)}))
            other.start()
            other.join()
        return things.update(thing["uuid"], {"n": current["n"] + 1},
                             expect_revision=current["revision"])

    done = conflicts.retry_conflicts(work, sleep=no_pause)
    assert runs == [1, 2, 3]
    assert done["n"] == 1 and done["other"] == 2 and done["revision"] == 4


def test_work_that_wrote_before_its_conflict_is_not_run_twice(store):
    things = store.collection("things")
    thing = things.insert({"n": 0})
    runs = []

    def writes_then_conflicts():
        runs.append(1)
        things.insert({"log": "side effect"})
        raise RevisionConflict("things", thing["uuid"], 1, 2)

    with pytest.raises(conflicts.Busy) as err:
        conflicts.retry_conflicts(writes_then_conflicts, sleep=no_pause)
    assert err.value.status == 503 and err.value.headers == {"Retry-After": "1"}
    assert len(runs) == 1
    assert len(things.find(log="side effect")) == 1


def test_pauses_are_bounded_and_grow(store):
    pauses = []

    def always():
        raise RevisionConflict("things", "u", 1, 2)

    with pytest.raises(conflicts.Busy):
        conflicts.retry_conflicts(always, sleep=pauses.append)
    assert len(pauses) == conflicts.ATTEMPTS - 1
    assert all(0 <= p <= conflicts.LONGEST_PAUSE for p in pauses)
    # the worst case of every pause together stays well under a client's patience
    worst = sum(min(conflicts.LONGEST_PAUSE, conflicts.FIRST_PAUSE * 2 ** a)
                for a in range(conflicts.ATTEMPTS - 1))
    assert worst < 1.0


# ---- through the API: concurrent clients beside a daemon-like writer --------------------

CLIENTS = 6
ROUNDS = 15
# each client owns one field, so that every acknowledged write must be visible at the end
FIELDS = {
    "size": lambda i: i,
    "color": lambda i: ("red", "green", "blue")[i % 3],
    "enabled": lambda i: i % 2 == 0,
    "secret_note": lambda i: f"note-{i}",
    "tags": lambda i: [f"t{i}"],
    "name": lambda i: f"racer-{i}",
}


class RetryCounter(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record):
        if record.getMessage().startswith("retrying after a conflict"):
            self.count += 1


def test_concurrent_partial_puts_beside_a_busy_writer_never_see_409(server, admin):
    w = admin.post(W, {"name": f"w-{uuid.uuid4().hex[:12]}",
                       "project_id": ADMIN_PROJECT}).json
    item = f"{W}/{w['uuid']}"
    stop = threading.Event()
    # the daemon: its own store over the same files
    daemon_store = Store(server.settings["state_dir"])
    daemon_writes = [0]

    def daemon():
        # it never pauses: far busier than a real daemon, so conflicts are sure to happen
        coll = daemon_store.collection("test_widgets")
        while not stop.is_set():
            coll.update(w["uuid"], {"status": ("NEW", "ACTIVE")[daemon_writes[0] % 2]})
            daemon_writes[0] += 1

    answers = {name: [] for name in FIELDS}

    def client(name, value_of):
        for i in range(ROUNDS):
            resp = admin.put(item, {name: value_of(i)})
            answers[name].append((resp.status, resp.json))

    retries = RetryCounter()
    logger = logging.getLogger("appliance.api")
    logger.addHandler(retries)
    writer = threading.Thread(target=daemon)
    writer.start()
    try:
        clients = [threading.Thread(target=client, args=item_) for item_ in FIELDS.items()]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
    finally:
        stop.set()
        writer.join()
        logger.removeHandler(retries)
        daemon_store.close()

    for name, value_of in FIELDS.items():
        statuses = [status for status, _ in answers[name]]
        assert statuses == [200] * ROUNDS, (name, answers[name])
        # each answer shows the write it acknowledged
        assert [body[name] for _, body in answers[name]] == [value_of(i)
                                                             for i in range(ROUNDS)]
    final = admin.get(item).json
    for name, value_of in FIELDS.items():
        assert final[name] == value_of(ROUNDS - 1), name
    # the race was real: the daemon wrote meanwhile and requests had to be worked out again
    assert daemon_writes[0] > 0
    assert retries.count > 0, "no conflict happened: the test did not test the retry"
