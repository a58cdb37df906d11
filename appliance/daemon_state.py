"""Each daemon's state as the API can read it: running, waiting for work, restarting,
failed or stopped, since when, and its last successful pass (GET /v1/system/daemons,
the web console's overview; docs/supervisor.md, "Daemon states").

The API never asks the supervisor or systemd: it reads small files under
`<state>/run/daemons/`, one per daemon, which whoever sees the daemon start or end writes:
- the daemon itself at its start (`record_started`, from daemons/base.py's `run` and the
  agent's `main`): its pid, the pid's start time and the boot, so that a record whose
  process is gone, or from another boot, is never taken for a running daemon;
- the daemon again at a clean end (exit status 0: stopped);
- `appliance up` when it reaps a child (`record_ended`, with the time of the restart it
  has planned), and systemd through each unit's `ExecStopPost=` (`python -m
  appliance.daemon_state ended NAME`, with the unit's $SERVICE_RESULT and $EXIT_STATUS;
  systemd restarts after RestartSec=1).
A record is replaced whole (write to a temporary file, then rename), so a reader sees
the old one or the new one.

The last successful pass is what the daemons already record for the metrics
(appliance_daemon_last_success_timestamp_seconds, appliance/metrics.py): no second
record of it.
"""

import json
import os
import sys
import time
from datetime import datetime, timezone

from appliance.processes import boot_id, start_time

# an end whose planned restart is this long past, with no start since, is a failure
RESTART_GRACE_SECONDS = 15.0
# systemd's RestartSec of the daemons' units
SYSTEMD_RESTART_SECONDS = 1.0
STATES = ("running", "waiting", "starting", "restarting", "failed", "stopped")


def directory(state_dir):
    return os.path.join(state_dir, "run", "daemons")


def clear(state_dir):
    """`appliance up` and first boot at their start: what an earlier run recorded is not
    this run's. The folder is made here, by the state's owner (first boot hands it to the
    appliance user), so that the node agent (root) never makes it first."""
    path = directory(state_dir)
    os.makedirs(path, mode=0o755, exist_ok=True)
    if os.path.isdir(path):
        for name in os.listdir(path):
            try:
                os.unlink(os.path.join(path, name))
            except OSError:
                pass


def _write(state_dir, name, record):
    from appliance import files  # noqa: PLC0415 (the one writer of whole files)
    path = os.path.abspath(directory(state_dir))
    try:
        # a state shown to people: a power loss may bring back the previous one
        files.write_file(os.path.join(path, f"{name}.json"), json.dumps(record),
                         mode=0o644, sync=False)
    except (OSError, ValueError):      # ValueError: files.PathRefused
        # a state the console shows, never a reason for a daemon or the supervisor to fail
        import logging  # noqa: PLC0415
        logging.getLogger("appliance.daemon_state").warning(
            "cannot record the state of %s under %s", name, path, exc_info=True)


def _now_text(now=None):
    return datetime.fromtimestamp(now if now is not None else time.time(), timezone.utc) \
        .strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def supervised(state_dir):
    """Whether something that records this process's end and restarts it watches it:
    systemd (which sets INVOCATION_ID for a unit's processes) or the `appliance up` of
    this state (its pid is in <state>/appliance-up.pid, and it is our parent)."""
    if os.environ.get("INVOCATION_ID"):
        return True
    try:
        with open(os.path.join(state_dir, "appliance-up.pid")) as f:
            return f.read().strip() == str(os.getppid())
    except OSError:
        return False


def record_started(state_dir, name, pid=None):
    pid = pid or os.getpid()
    _write(state_dir, name, {"name": name, "boot_id": boot_id(), "pid": pid,
                             "pid_start": start_time(pid), "started_at": time.time(),
                             "supervised": supervised(state_dir)})


def record_ended(state_dir, name, reason, *, clean=False, restart_at=None):
    """The daemon's process ended: `clean` (asked to stop, exit 0), else it will be
    restarted at `restart_at` (Unix time) or fails."""
    old = read_record(state_dir, name) or {}
    _write(state_dir, name, {"name": name, "boot_id": boot_id(), "pid": old.get("pid"),
                             "started_at": old.get("started_at"), "ended_at": time.time(),
                             "reason": reason, "clean": clean, "restart_at": restart_at})


def record_idle(state_dir, name, idle):
    """The daemon stopped because it had nothing to do (daemons/base.py, "Stopping when
    idle"): `idle` names the generation of each kind whose next write starts it again, and
    the time its own next timer is due; its supervisor reads them once the process is
    gone. Shown as waiting, like an on-demand daemon not started yet."""
    old = read_record(state_dir, name) or {}
    _write(state_dir, name, {"name": name, "boot_id": boot_id(), "pid": os.getpid(),
                             "started_at": old.get("started_at"), "ended_at": time.time(),
                             "reason": "stopped while idle", "clean": True, "idle": idle})


def idle_this_boot(record):
    """Whether `record` is the idle record of this boot's last instance: every start
    replaces the record (record_started), so an idle record is the last end's."""
    return bool(record) and record.get("boot_id") == boot_id() \
        and isinstance(record.get("idle"), dict) and record.get("ended_at") is not None


def read_record(state_dir, name):
    try:
        with open(os.path.join(directory(state_dir), f"{name}.json")) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def state_of(daemon, record, on_demand, now, this_boot):
    """(state, since (Unix time or None), reason or None) of one daemon."""
    if record is None or record.get("boot_id") != this_boot:
        if on_demand:
            return "waiting", None, "started at the first write of its work"
        return "starting", None, "no start recorded yet"
    if record.get("ended_at") is None:
        pid = record.get("pid")
        if isinstance(pid, int) and start_time(pid) == record.get("pid_start"):
            return "running", record.get("started_at"), None
        if record.get("supervised"):
            # its supervisor records the end at once (appliance up reaps within 0.1 s,
            # systemd runs ExecStopPost): the moment between is a restart's beginning
            return "restarting", None, f"its process (pid {pid}) ended"
        return "failed", None, f"its process (pid {pid}) is gone and nobody recorded its end"
    ended = record["ended_at"]
    if record.get("idle") is not None:
        return "waiting", ended, "stopped while idle; started again at the next write of its work"
    if record.get("clean"):
        return "stopped", ended, record.get("reason")
    restart_at = record.get("restart_at") or ended + SYSTEMD_RESTART_SECONDS
    if now < restart_at + RESTART_GRACE_SECONDS:
        return "restarting", ended, record.get("reason")
    return "failed", ended, f"{record.get('reason')}; not restarted since"


def states(state_dir, daemons, on_demand, last_success=None, now=None):
    """One object per daemon (the descriptors' order): name, state, since, reason,
    on_demand, pid, last_success_at and the kind it was of."""
    now = time.time() if now is None else now
    this_boot = boot_id()
    last_success = last_success or {}
    out = []
    for name in daemons:
        record = read_record(state_dir, name)
        state, since, reason = state_of(name, record, name in on_demand, now, this_boot)
        success = last_success.get(name)
        out.append({
            "name": name, "state": state, "since": _now_text(since) if since else None,
            "reason": reason, "on_demand": name in on_demand,
            "pid": record.get("pid") if state == "running" else None,
            "last_success_at": _now_text(success[0]) if success else None,
            "last_success_kind": success[1] if success else None})
    return out


# ---- the API's route ----------------------------------------------------------------

PATH = "/v1/system/daemons"
PERMISSION = "appliance.daemons.read"
RESPONSE_SCHEMA = {"type": "array", "items": {"type": "object", "properties": {
    "name": {"type": "string"},
    "state": {"enum": list(STATES)},
    "since": {"type": ["string", "null"], "format": "date-time"},
    "reason": {"type": ["string", "null"]},
    "on_demand": {"type": "boolean", "description": "started at the first write of its "
                                                    "work in the image"},
    "pid": {"type": ["integer", "null"]},
    "last_success_at": {"type": ["string", "null"], "format": "date-time",
                        "description": "its last successful pass (of any kind)"},
    "last_success_kind": {"type": ["string", "null"]}}}}


def register(api):
    from appliance import metrics  # noqa: PLC0415
    from appliance.api.errors import Forbidden  # noqa: PLC0415
    from appliance.tenancy import is_platform  # noqa: PLC0415
    from appliance import capabilities  # noqa: PLC0415
    names = [d.name for d in capabilities.daemons()]
    on_demand = {d.name for d in capabilities.daemons() if d.on_demand or d.on_demand_masters}

    def read(call):
        # the appliance's own processes: never a project's business
        if not is_platform(call.principal):
            raise Forbidden("the daemons are the whole appliance's: use an admin's token "
                            "(unscoped or scoped to the admin project)")
        return states(call.api.settings["state_dir"], names, on_demand,
                      metrics.last_successes(call.api.settings["state_dir"]))

    api.route("GET", PATH, read, permission=PERMISSION, tag="system",
              response_schema=RESPONSE_SCHEMA,
              summary="Each daemon's state (running, waiting, restarting, failed, "
                      "stopped), since when, and its last successful pass")


# ---- systemd's ExecStopPost ---------------------------------------------------------

def main(argv=None):
    """`python -m appliance.daemon_state ended NAME`, run by systemd after the unit's
    process ended ($SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS: systemd.exec(5))."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "ended":
        print("usage: python -m appliance.daemon_state ended NAME", file=sys.stderr)
        return 2
    from appliance import config  # noqa: PLC0415
    result = os.environ.get("SERVICE_RESULT", "")
    code, status = os.environ.get("EXIT_CODE", ""), os.environ.get("EXIT_STATUS", "")
    clean = result == "success"
    reason = "stopped" if clean else f"{result}: {code} {status}".strip()
    try:
        state_dir = config.load()["state_dir"]
        if clean and idle_this_boot(read_record(state_dir, argv[1])):
            # it stopped because it was idle (it wrote so at its exit): it waits for its
            # path unit, which is not "stopped"
            return 0
        record_ended(state_dir, argv[1], reason, clean=clean)
    except config.ConfigError as e:
        # the state shown stays the last one; the unit's own result is systemd's
        print(f"daemon_state: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
