"""Child process for the store tests: writes and reports every acknowledged write.

usage: writer.py STATE_DIR MODE COUNT [COMPACT_MIN_BYTES]
  insert   insert COUNT records, print each uuid after insert() returned
  batch    insert COUNT batches of 20 records with insert_many, print their uuids after
           it returned (long journal lines: a kill can tear one)
  cas      increment the `n` field of the single record of kind `counter` COUNT times
           with compare-and-set, retrying on conflict
  serve    another process on command: read lines from stdin (`insert`, `update UUID`,
           `delete UUID`, `compact`) and print the uuid (or `ok`) once the write returned
COMPACT_MIN_BYTES lowers the journal size past which writes compact, so that a kill
lands in the middle of compactions too.
"""

import sys

from state import Collection, RevisionConflict, Store


def serve(things):
    for command in sys.stdin:
        verb, _, arg = command.strip().partition(" ")
        if verb == "insert":
            print(things.insert({"name": "served", "payload": "x" * 64})["uuid"], flush=True)
        elif verb == "update":
            print(things.update(arg, {"name": "updated"})["uuid"], flush=True)
        elif verb == "delete":
            print(things.delete(arg)["uuid"], flush=True)
        elif verb == "compact":
            things.compact()
            print("ok", flush=True)


def main(state_dir, mode, count, compact_min=None):
    if compact_min is not None:
        Collection.COMPACT_MIN_BYTES = compact_min
    store = Store(state_dir)
    things = store.collection("things")
    if mode == "insert":
        for i in range(count):
            record = things.insert({"name": f"w{i}", "payload": "x" * 64})
            print(record["uuid"], flush=True)
    elif mode == "batch":
        for i in range(count):
            made = things.insert_many([{"name": f"b{i}-{j}", "payload": "x" * 64}
                                       for j in range(20)])
            print("\n".join(r["uuid"] for r in made), flush=True)
    elif mode == "cas":
        counter = store.collection("counter")
        uuid = counter.records()[0]["uuid"]
        done = 0
        while done < count:
            current = counter.require(uuid)
            try:
                counter.update(uuid, {"n": current["n"] + 1}, expect_revision=current["revision"])
            except RevisionConflict:
                continue
            done += 1
    elif mode == "serve":
        serve(things)
        return
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]),
         int(sys.argv[4]) if len(sys.argv) > 4 else None)
