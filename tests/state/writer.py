"""Child process for the store tests: writes and reports every acknowledged write.

usage: writer.py STATE_DIR MODE COUNT
  insert   insert COUNT records, print each uuid after insert() returned
  cas      increment the `n` field of the single record of kind `counter` COUNT times
           with compare-and-set, retrying on conflict
"""

import sys

from state import RevisionConflict, Store


def main(state_dir, mode, count):
    store = Store(state_dir)
    if mode == "insert":
        things = store.collection("things")
        for i in range(count):
            record = things.insert({"name": f"w{i}", "payload": "x" * 64})
            print(record["uuid"], flush=True)
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
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
