"""Reconcile step of the delivery daemon for the four secret kinds (spec 3.1).

Level-triggered and idempotent: told only which kind changed, it compares every record
with the data plane and moves what differs:

- a record with a value to deliver and not ACTIVE with that value in place
  -> IN_PROGRESS, file written, -> ACTIVE; a failed write -> ERROR with a reason, retried
  with back-off (per record: one broken record never holds back the others);
- a record with nothing to deliver -> its file withdrawn, status NEW;
- a file whose record is gone -> removed.

Status moves are compare-and-set on the record's revision, so an API write that lands
during a delivery (a rotation) is never overwritten by a stale ACTIVE: the change simply
triggers the next pass. Values are never logged.
"""

import time

from appliance.backoff import Backoff

from .crypto import DecryptionError, SecretBox
from .kinds import KINDS, UNDELIVERED, effective_value, is_undelivered

FIRST_RETRY, MAX_RETRY = 0.5, 60.0


class SecretDelivery:
    kinds = tuple(KINDS)

    def __init__(self, store, dataplane, log, clock=time.monotonic):
        self.store = store
        self.dataplane = dataplane
        self.box = SecretBox(store)
        self.log = log
        self.clock = clock
        # (kind, uuid) -> the back-off of a record whose delivery failed
        self._backoff = Backoff(FIRST_RETRY, MAX_RETRY, clock=clock)

    def folder(self, kind):
        return ("secret", KINDS[kind][0])

    def _desired(self, kind, record):
        return effective_value(kind, self.box.open_fields(kind, record, KINDS[kind][1]))

    def reconcile(self, kind):
        """One pass over `kind`. Returns seconds until a retry is due, or None."""
        coll = self.store.collection(kind)
        folder = self.folder(kind)
        now = self.clock()
        deliver, withdraw, broken = {}, [], {}
        records = coll.records()
        for record in records:
            uuid = record["uuid"]
            try:
                desired = self._desired(kind, record)
            except DecryptionError:
                broken[uuid] = (record, "stored value cannot be decrypted with this "
                                        "appliance's key")
                continue
            if desired is None:
                withdraw.append(record)
                continue
            if kind == "secret_ssh_keys" and record.get("target"):
                # the node agents deliver a targeted key: its status is theirs (written by
                # appliance/agent/status.py); two writers would undo each other's moves
                self._write_quietly(kind, folder, uuid, desired)
                continue
            if record["status"] == "ACTIVE" and self.dataplane.read(*folder, uuid) == desired:
                self._backoff.forget((kind, uuid))
                continue
            if record["status"] == "ERROR" and self._backoff.until((kind, uuid)) > now:
                continue
            deliver[uuid] = (record, desired)

        self._withdraw(coll, folder, withdraw)
        self._deliver(coll, kind, folder, deliver)
        if broken:
            self._fail(coll, {u: (r, reason) for u, (r, reason) in broken.items()})
        live = {r["uuid"] for r in records}
        for name in self.dataplane.names(*folder):
            if name not in live:
                self.dataplane.remove(*folder, name)
                self.log.info("withdrew the value of deleted %s %s", kind, name)
        for key in [k for k in self._backoff.keys() if k[0] == kind and k[1] not in live]:
            self._backoff.forget(key)
        pending = [self._backoff.until(k) for k in self._backoff.keys() if k[0] == kind]
        return max(min(pending) - self.clock(), 0.05) if pending else None

    def _write_quietly(self, kind, folder, uuid, desired):
        if self.dataplane.read(*folder, uuid) == desired:
            return
        try:
            self.dataplane.write((*folder, uuid), desired)
        except OSError as e:
            self.log.warning("%s %s: cannot write to the data plane: %s", kind, uuid,
                             e.strerror or type(e).__name__)

    def _withdraw(self, coll, folder, records):
        changes = {}
        for record in records:
            if self.dataplane.remove(*folder, record["uuid"]):
                self.log.info("withdrew %s %s: nothing to deliver", coll.kind, record["uuid"])
            self._backoff.forget((coll.kind, record["uuid"]))
            if not is_undelivered(record):
                changes[record["uuid"]] = (record["revision"], dict(UNDELIVERED))
        if changes:
            coll.update_many(changes)

    def _deliver(self, coll, kind, folder, pending):
        if not pending:
            return
        started = coll.update_many({
            uuid: (record["revision"], {"status": "IN_PROGRESS", "status_reason": None})
            for uuid, (record, _) in pending.items() if record["status"] != "IN_PROGRESS"})
        done, failed = {}, {}
        for uuid, (record, desired) in pending.items():
            current = started.get(uuid, record if record["status"] == "IN_PROGRESS" else None)
            if current is None:
                continue        # changed under us: the change brings another pass
            try:
                self.dataplane.write((*folder, uuid), desired)
            except OSError as e:
                failed[uuid] = (current, f"cannot write to the data plane: "
                                         f"{e.strerror or type(e).__name__}")
                continue
            done[uuid] = (current["revision"], {"status": "ACTIVE", "status_reason": None})
            self._backoff.forget((kind, uuid))
        if done:
            coll.update_many(done)
            self.log.info("delivered %d %s", len(done), kind)
        if failed:
            self._fail(coll, failed)

    def _fail(self, coll, failed):
        changes = {}
        for uuid, (record, reason) in failed.items():
            delay = self._backoff.failed((coll.kind, uuid))
            changes[uuid] = (record["revision"], {"status": "ERROR", "status_reason": reason})
            self.log.warning("%s %s: %s; retrying in %.1f s", coll.kind, uuid, reason, delay)
        coll.update_many(changes)
