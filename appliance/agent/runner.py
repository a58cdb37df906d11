"""The node side's loop: pull the payload, diff it by hash against what was applied, hand
each change to its capability's driver, report the results (docs/agent.md, "Runner").

What was applied, with each item's last result, is kept in `<state_dir>/applied.json`
(written atomically after every change), so that after a restart the agent re-applies
nothing whose hash is unchanged and whose result is on disk. After a (re)start and after
every reconnect it reports everything it has (`full`), and it polls without a hash so the
payload comes at once: a full resync. While the API is down it keeps what it applied and
retries with a back-off. Drivers' tick() runs every second on its own thread; driver calls
never overlap (one lock).
"""

import json
import logging
import os
import random
import threading
import time

from appliance.backoff import Backoff

from . import capabilities
from .client import Refused, Unreachable

STATE_FILE = "applied.json"
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 30.0
TICK_SECONDS = 1.0


def state_path(state_dir):
    return os.path.join(state_dir, STATE_FILE)


def read_state(state_dir):
    try:
        with open(state_path(state_dir)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def actual_of(entry):
    """An applied entry as the report carries it."""
    item, result = entry["item"], entry["actual"]
    return {"uuid": item["uuid"], "kind": item["kind"], "master": item["master"],
            "hash": item["hash"], "status": result.get("status", "ERROR"),
            "reason": result.get("reason"), "value": result.get("value") or {}}


class Runner:
    def __init__(self, host, client, drivers=None, log=None, wait=25.0):
        self.host = host
        self.client = client
        self.log = log or logging.getLogger("appliance.agent.runner")
        self.wait = wait
        classes = drivers if drivers is not None else capabilities.drivers()
        self.drivers = {kind: cls(host) for kind, cls in classes.items()}
        self._lock = threading.RLock()         # the applied state and every driver call
        self._stop = threading.Event()
        self._threads = []
        state = read_state(host.state_dir) or {}
        if state.get("node") not in (None, host.node):
            # the state of another node (the machine was enrolled anew): none of it is ours
            self.log.warning("state of node %s found; starting afresh", state.get("node"))
            state = {}
        self.applied = state.get("items", {})
        self.hash = state.get("hash")
        self.contact = state.get("contact")
        self.needs_full = True                 # a (re)start: report everything once
        self.polled_hash = None                # a (re)start: the first poll does not wait

    # ---- one round ---------------------------------------------------------------------

    def step(self):
        """One poll and what follows; returns the pause before the next (Retry-After)."""
        body, pause = self.client.payload(self.polled_hash, self.wait if self.polled_hash
                                          else 0)
        self.apply(body)
        self.polled_hash = body["hash"]
        return pause

    def apply(self, body):
        changed, removed = [], []
        with self._lock:
            target = {item["uuid"]: item for item in body["resources"]}
            again = self._hand_over(target, removed)
            for uuid, item in target.items():
                before = self.applied.get(uuid)
                if item.get("unavailable"):
                    continue                    # keep what the node has until it renders
                if before is not None and before["item"]["hash"] == item["hash"] and \
                        uuid not in again:
                    continue
                self.applied[uuid] = {"item": item, "actual": self._apply_one(item, before)}
                changed.append(uuid)
                # after each item, so that a crash never makes one run twice (on_change);
                # one fsync for the batch below (an fsync per item cost ~30 ms each)
                self._save(sync=False)
            kept = {self._claim(self.applied[u]["item"]) for u in target if u in self.applied}
            for uuid in [u for u in self.applied if u not in target]:
                item = self.applied[uuid]["item"]
                # a file another item still writes stays: forgetting this one is enough
                claim = self._claim(item)
                if (claim is not None and claim in kept) or self._remove_one(item):
                    del self.applied[uuid]
                    removed.append(uuid)
                    self._save(sync=False)
            self.hash = body["hash"]
            self._save()
        self._report(changed, removed)

    def _claim(self, item):
        """(kind, what the item writes) when its driver says (`claim`: a config's file),
        else None: two items of one claim must not undo each other."""
        claim = getattr(self.drivers.get(item["kind"]), "claim", None)
        found = claim(item) if claim else None
        return None if found is None else (item["kind"], found)

    def _hand_over(self, target, removed):
        """An applied item the platform now `refused` because another item writes the same
        file (configs/paths.py) gives the file up: it is forgotten without removing the
        file, and the item that keeps it is applied again (a file it last lost to the
        refused one gets its content back; on_change runs only if the bytes changed).
        Returns the uuids to apply again."""
        again = set()
        for uuid, item in target.items():
            if not item.get("refused") or uuid not in self.applied:
                continue
            claim = self._claim(self.applied[uuid]["item"])
            owners = {u for u, i in target.items() if claim is not None and u != uuid
                      and not i.get("unavailable") and self._claim(i) == claim}
            if owners:
                del self.applied[uuid]
                removed.append(uuid)
                again |= owners
        return again

    def _apply_one(self, item, before):
        driver = self.drivers.get(item["kind"])
        if driver is None:
            return {"status": "ERROR", "reason": f"this agent has no driver for "
                                                 f"{item['kind']}", "value": {}}
        try:
            result = driver.apply(item, before["item"] if before else None)
        except Exception as e:
            self.log.exception("apply of %s %s", item["kind"], item["uuid"])
            return {"status": "ERROR", "reason": f"{type(e).__name__}: {e}", "value": {}}
        self.log.info("applied %s %s: %s", item["kind"], item["uuid"], result.get("status"))
        return result

    def _remove_one(self, item):
        """True when removed (or nothing to remove with); False keeps it for a retry."""
        driver = self.drivers.get(item["kind"])
        if driver is None:
            return True
        try:
            driver.remove(item)
        except Exception:
            self.log.exception("remove of %s %s; retried at the next payload",
                               item["kind"], item["uuid"])
            return False
        self.log.info("removed %s %s", item["kind"], item["uuid"])
        return True

    # ---- drivers' periodic work --------------------------------------------------------

    def tick(self):
        changed = []
        with self._lock:
            for kind, driver in self.drivers.items():
                if not hasattr(driver, "tick"):
                    continue
                items = [e["item"] for e in self.applied.values() if e["item"]["kind"] == kind]
                try:
                    results = driver.tick(items) or []
                except Exception:
                    self.log.exception("tick of %s", kind)
                    continue
                for result in results:
                    entry = self.applied.get(result.get("uuid"))
                    if entry is None:
                        continue
                    if "value_update" in result:
                        # a driver's readings: the applied status and value stay
                        entry["actual"] = {**entry["actual"], "value": {
                            **(entry["actual"].get("value") or {}), **result["value_update"]}}
                    else:
                        entry["actual"] = {k: result.get(k) for k in ("status", "reason",
                                                                     "value")}
                    changed.append(result["uuid"])
            if changed:
                self._save(sync=False)      # a result, not a change made on the node
        if changed:
            self._report(changed, [])

    # ---- reports and state -------------------------------------------------------------

    def _report(self, changed, removed):
        """Report what changed (everything, when a full report is owed). A failed report
        is owed in full: the next one after the API answers again says everything."""
        with self._lock:
            full = self.needs_full
            uuids = list(self.applied) if full else [u for u in changed if u in self.applied]
            resources = [actual_of(self.applied[u]) for u in uuids]
        if not resources and not removed and not full:
            return
        try:
            self.client.report(resources, removed, full)
        except (Unreachable, Refused) as e:
            self.log.warning("report failed (%s); a full report follows", e)
            self.needs_full = True
            return
        with self._lock:
            if full:
                self.needs_full = False
            self.contact = time.time()
            self._save(sync=False)          # only the time of the last contact

    def _save(self, sync=True):
        self.host.write_state(STATE_FILE, json.dumps({
            "node": self.host.node, "agent": self.host.agent, "hash": self.hash,
            "contact": self.contact, "items": self.applied}, sort_keys=True), sync=sync)

    # ---- the loops ---------------------------------------------------------------------

    def start(self):
        for target in (self._poll_loop, self._tick_loop):
            t = threading.Thread(target=target, daemon=True, name=f"agent-{target.__name__}")
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout=2.0):
        """Stop after the driver call under way, if any; the process exits next. The poll
        thread may sit in a long poll: it dies with the process (the state on disk is
        whole, written atomically)."""
        self._stop.set()
        for t in self._threads:
            if t.name.endswith("_tick_loop"):
                t.join(timeout)
        # kept: no driver call starts after stop (a runner is not started again)
        self._lock.acquire(timeout=timeout * 30)

    def _poll_loop(self):
        backoff = Backoff(BACKOFF_FIRST, BACKOFF_MAX)
        while not self._stop.is_set():
            try:
                pause = self.step()
            except (Unreachable, Refused) as e:
                # keep everything; after the API answers again: poll at once, report all
                delay = backoff.failed("api")
                self.log.warning("API: %s; again in %.1f s", e, delay)
                self.polled_hash, self.needs_full = None, True
                self._stop.wait(delay * random.uniform(0.8, 1.2))
                continue
            except Exception:
                delay = backoff.failed("api")
                self.log.exception("agent round failed; again in %.1f s", delay)
                self.polled_hash = None
                self._stop.wait(delay)
                continue
            backoff.succeeded("api")
            if self.needs_full:
                self._report([], [])
            if pause:
                self._stop.wait(pause * random.uniform(0.5, 1.0))

    def _tick_loop(self):
        while not self._stop.wait(TICK_SECONDS):
            self.tick()
