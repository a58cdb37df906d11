"""The node side of services: a systemd unit per service item (docs/services.md).

`apply` writes the unit (atomically, and reloads systemd when its text changed), sets its
boot state (enable/disable) and its run state (start/stop, restart when the restart
counter moved, try-restart when the update counter moved), then reports what systemd
says. `tick` (about every second) keeps monopoly leases and reports units whose state
moved on by themselves: a oneshot that finished, a unit that failed.

Runs on a node from the agent: the stdlib, this package and the node toolbox
(appliance/agent/host.py) only.
"""

import os
import shutil
import time

from appliance.agent.host import Host

from .lease import Leases

FENCE = "appliance-fence.conf"
# a monopoly unit's start deadline (wall-clock seconds) is kept in <agent state>/leases/<unit>
# while this node holds the lease: the unit's ExecStartPre refuses a start that systemd
# runs after it (a start queued behind a slow daemon-reload must not run once another
# node may hold the lease)
DEADLINE_DIR = "leases"
PROPS = ("ActiveState", "SubState", "Result", "ExecMainStatus", "InvocationID")
# what a service reports on a host whose PID 1 is not systemd (`make run`'s development
# node, docs/dev-node.md): said once per item, as its status, not logged every tick
NO_SYSTEMD = "this node has no systemd (development node): services cannot run here"
# systemctl's words when systemd is not PID 1 (it exits 1); 127: no systemctl at all
NO_SYSTEMD_OUTPUT = "not been booted with systemd"


class Driver:
    def __init__(self, host, clock=time.monotonic):
        self.host = host
        # the agent's own unit: a monopoly unit is bound to it (see fence_text)
        self.agent_unit = getattr(host, "agent_unit", None) or own_unit()
        self.leases = Leases(host.api, host.node, clock=clock, log=host.log)
        # item uuid -> what this driver last reported, and the invocation of a oneshot
        # it started and waits for
        self.reported = {}
        self.waiting = {}
        # item uuid -> whether this node held the monopoly lease at the last look
        self.held = {}
        self.said_no_systemd = False

    # ---- systemd ---------------------------------------------------------------------

    def systemctl(self, *args):
        code, output = self.host.systemctl(*args)
        if code == 127 or code != 0 and NO_SYSTEMD_OUTPUT in (output or ""):
            raise NoSystemd(NO_SYSTEMD)
        if code != 0:
            raise UnitFailure(f"systemctl {' '.join(args)}: exit code {code}: "
                              f"{(output or '').strip()[-400:]}")
        return output

    def show(self, units):
        """{unit: {property: value}} in one systemctl call."""
        if not units:
            return {}
        output = self.systemctl("show", "-p", ",".join(PROPS), *units)
        blocks = [b for b in (output or "").split("\n\n")]
        shown = {}
        for unit, block in zip(units, blocks + [""] * (len(units) - len(blocks))):
            props = {}
            for line in block.splitlines():
                key, _, value = line.partition("=")
                props[key] = value
            shown[unit] = props
        return shown

    def unit_path(self, unit):
        return self.host.path(f"{self.host.unit_dir}/{unit}")

    # ---- the driver contract -----------------------------------------------------------

    def apply(self, item, applied):
        value = item["value"]
        before = (applied or {}).get("value") or {}
        unit = value["unit"]
        try:
            if before.get("unit") not in (None, unit):
                self.drop_unit(before["unit"])
            fence = [(FENCE, self.fence_text(unit))] if value["monopoly"] else []
            written = self.host.ensure_unit(unit, value["text"], dropins=fence,
                                            systemctl=self.systemctl)
            self.systemctl("enable" if value["boot"] else "disable", unit)
            if value["monopoly"]:
                self.apply_monopoly(item, before, written)
            else:
                self.apply_run(item, before, written, value["run"])
            return self.remember(item, self.observe([item])[item["uuid"]])
        except UnitFailure as e:
            return self.remember(item, {"status": "ERROR", "reason": str(e), "value": {
                "active_state": None, "exit_code": None, "holder": False}})

    def apply_run(self, item, before, written, run):
        """Start, stop or restart the unit as the item asks, given what was applied
        before (`before`: its value, {} when the unit did not run)."""
        value, unit = item["value"], item["value"]["unit"]
        if not run:
            self.systemctl("stop", unit)
            self.waiting.pop(item["uuid"], None)
            return
        first = not before.get("run")
        restart = written or value["restart"] != before.get("restart")
        if value["oneshot"]:
            # a oneshot runs once per delivery, restart action or change of its unit;
            # it is not waited for here (tick reports its exit code)
            if first or restart:
                self.start_oneshot(item)
        elif restart:
            self.systemctl("restart", unit)
        else:
            self.systemctl("start", unit)       # also brings back a unit stopped by hand
        if not (first or restart) and value["update"] != before.get("update"):
            self.systemctl("try-restart", unit)

    def start_oneshot(self, item):
        unit = item["value"]["unit"]
        invocation = self.show([unit])[unit].get("InvocationID", "")
        self.systemctl("restart", "--no-block", unit)
        self.waiting[item["uuid"]] = invocation

    def apply_monopoly(self, item, before, written):
        service = item["value"]["service"]
        was = self.held.get(item["uuid"], False)
        holding = item["value"]["run"] and self.leases.ask(service)
        if not item["value"]["run"]:
            self.leases.drop(service)
        self.held[item["uuid"]] = holding
        self.write_deadline(item["value"]["unit"], service)
        if holding:
            self.apply_run(item, before if was else {}, written, True)
        else:
            self.apply_run(item, before, written, False)

    def fence_text(self, unit):
        """A monopoly unit runs only while this agent runs (BindsTo= with After=): an
        agent that is killed cannot renew the lease, and another node takes over when it
        expires, so its unit must not run on. A restarted agent starts it again if the
        lease is still its own. And it starts only before the deadline of this node's
        lease (write_deadline): systemd may run a start job long after it was queued.
        `$$` and `%%` are systemd's escapes of `$` and `%`."""
        text = "[Unit]\n"
        if self.agent_unit:
            text += f"BindsTo={self.agent_unit}\nAfter={self.agent_unit}\n"
        # `+`: as root, whatever User= says (the agent's state directory is root's only)
        return text + ("[Service]\nExecStartPre=+/bin/sh -c 'test \"$$(date +%%s)\" -lt "
                       f"\"$$(cat {self.deadline_path(unit)} 2>/dev/null || echo 0)\"'\n")

    def deadline_path(self, unit):
        return os.path.join(self.host.state_dir, DEADLINE_DIR, unit)

    def write_deadline(self, unit, service):
        """The wall-clock second before which this node may start `unit`: the lease's
        fencing point while it holds the lease, 0 when it does not."""
        remaining = self.leases.remaining(service)
        deadline = int(time.time() + remaining) if remaining > 0 else 0
        self.host.write_state(os.path.join(DEADLINE_DIR, unit), f"{deadline}\n")

    def remove(self, applied):
        value = applied["value"]
        self.leases.drop(value.get("service"))
        self.reported.pop(applied["uuid"], None)
        self.waiting.pop(applied["uuid"], None)
        self.held.pop(applied["uuid"], None)
        self.drop_unit(value["unit"])

    def drop_unit(self, unit):
        path = self.unit_path(unit)
        if os.path.exists(path):
            self.host.systemctl("stop", unit)
            self.host.systemctl("disable", unit)
            os.unlink(path)
            shutil.rmtree(path + ".d", ignore_errors=True)
            try:
                os.unlink(self.deadline_path(unit))
            except FileNotFoundError:
                pass
            try:
                self.systemctl("daemon-reload")
            except NoSystemd:
                return          # nothing ran it: the file's removal is all there is
            # a failed unit (a oneshot that exited non-zero) would stay listed, "not-found
            # failed", after its file is gone
            self.host.systemctl("reset-failed", unit)

    def tick(self, applied_items):
        items = [i for i in applied_items if i.get("kind") == "service" and i.get("value")]
        for item in items:
            if item["value"]["monopoly"] and item["value"]["run"]:
                self.keep_lease(item)
        try:
            observed = self.observe(items)
        except NoSystemd as e:
            # every item is ERROR for good: reported once (remember), said once in the log
            if items and not self.said_no_systemd:
                self.host.log.warning("services: %s", e)
                self.said_no_systemd = True
            observed = {i["uuid"]: no_systemd_result() for i in items}
        except UnitFailure as e:
            self.host.log.warning("systemctl show: %s", e)
            return []
        changed = []
        for item in items:
            actual = observed[item["uuid"]]
            if self.reported.get(item["uuid"]) != actual:
                changed.append({"uuid": item["uuid"], **self.remember(item, actual)})
        return changed

    def keep_lease(self, item):
        """Renew when due; start the unit on gaining the lease, stop it on losing it (or
        when it could not be renewed in time: self-fencing)."""
        value = item["value"]
        # None: the first look since this driver started (an agent restart), when the
        # unit may run or not whatever the lease says: both ways are enforced once
        was = self.held.get(item["uuid"])
        if self.leases.due(value["service"]):
            self.leases.ask(value["service"])
            self.write_deadline(value["unit"], value["service"])
        now = self.leases.holding(value["service"])
        try:
            if now and was is False or now and was is None and not value["oneshot"]:
                # (a oneshot found holding after a restart ran under this lease already)
                self.apply_run(item, {}, False, True)
            elif not now and was is not False:
                self.apply_run(item, {}, False, False)
        except NoSystemd:
            pass                # the item is ERROR with NO_SYSTEMD already (tick)
        except UnitFailure as e:
            self.host.log.warning("service %s: %s", value["unit"], e)
        self.held[item["uuid"]] = now

    # ---- what systemd says -------------------------------------------------------------

    def remember(self, item, actual):
        self.reported[item["uuid"]] = actual
        return actual

    def observe(self, items):
        """{item uuid: {"status", "reason", "value"}} from one `systemctl show`."""
        shown = self.show([i["value"]["unit"] for i in items])
        return {i["uuid"]: self.actual(i, shown.get(i["value"]["unit"], {})) for i in items}

    def actual(self, item, props):
        value = item["value"]
        state = props.get("ActiveState") or "unknown"
        holder = bool(value["monopoly"] and self.held.get(item["uuid"]))
        runs = value["run"] and (holder or not value["monopoly"])
        exit_code = None
        waiting = self.waiting.get(item["uuid"])
        ended = state in ("inactive", "failed")
        if value["oneshot"] and ended and waiting is not None \
                and props.get("InvocationID", "") != waiting:
            del self.waiting[item["uuid"]]         # the run it waited for is over
            waiting = None
        if value["oneshot"] and ended and waiting is None:
            exit_code = _int(props.get("ExecMainStatus"))
        status, reason = "IN_PROGRESS", None
        if not runs:
            if state in ("inactive", "failed", "unknown"):
                status = "ACTIVE"
                if value["monopoly"] and value["run"]:
                    other = self.leases.get(value["service"]).holder
                    reason = f"standby: node {other} holds the lease" if other not in (
                        None, self.host.node) else "standby: the lease could not be " \
                        "taken or renewed (no answer from the API)"
            else:
                reason = f"stopping ({state})"
        elif value["oneshot"]:
            if waiting is not None or not ended:
                reason = "running"
            elif exit_code == 0 and props.get("Result", "success") == "success":
                status = "ACTIVE"
            else:
                status = "ERROR"
                reason = f"exit code {exit_code} ({props.get('Result')})"
        elif state == "active":
            status = "ACTIVE"
        elif state == "failed":
            status, reason = "ERROR", f"unit failed ({props.get('Result')})"
        else:
            reason = f"{state} ({props.get('SubState')})"
        return {"status": status, "reason": reason,
                "value": {"active_state": state, "exit_code": exit_code, "holder": holder}}


def own_unit():
    """The systemd unit this process runs in (`appliance-agent.service` in the image),
    from its cgroup; None outside a service unit (a test, a shell)."""
    try:
        with open("/proc/self/cgroup") as f:
            text = f.read()
    except OSError:
        return None
    for line in text.splitlines():
        last = line.rsplit("/", 1)[-1]
        if last.endswith(".service") and "/system.slice/" in line:
            return last
    return None


def no_systemd_result():
    return {"status": "ERROR", "reason": NO_SYSTEMD,
            "value": {"active_state": None, "exit_code": None, "holder": False}}


class UnitFailure(Exception):
    pass


class NoSystemd(UnitFailure):
    """systemctl cannot operate: PID 1 is not systemd (or there is no systemctl)."""


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


# ---- by hand on a node: `python3 -m appliance.service.node apply ITEM.json` ---------------

def local_host(root="/", systemctl="systemctl", node=None, api=None):
    """The agent's Host for a run by hand (or a test in a guest) without the agent:
    `systemctl` through a command, an optional API client."""
    host = Host(root=root, state_dir=os.path.join(root, "var/lib/appliance-service"),
                systemctl=systemctl.split(), node=node, agent=node, api=api)
    host.agent_unit = None
    return host


def main(argv=None):
    import argparse
    import json
    parser = argparse.ArgumentParser(
        prog="python3 -m appliance.service.node",
        description="Apply, observe or remove one service item (as the agent's payload "
                    "carries it) with this node's systemd; prints the actual state as JSON.")
    parser.add_argument("verb", choices=["apply", "show", "remove"])
    parser.add_argument("item", help="the item as JSON, in a file ('-': stdin)")
    parser.add_argument("--applied", help="the item applied before, in a file")
    parser.add_argument("--root", default="/")
    parser.add_argument("--systemctl", default="systemctl",
                        help="the systemctl command (default: systemctl)")
    args = parser.parse_args(argv)

    def read(name):
        import sys
        if name == "-":
            return json.load(sys.stdin)
        with open(name) as f:
            return json.load(f)
    item = read(args.item)
    driver = Driver(local_host(args.root, args.systemctl))
    if args.verb == "apply":
        out = driver.apply(item, read(args.applied) if args.applied else None)
    elif args.verb == "show":
        out = driver.observe([item])[item["uuid"]]
    else:
        driver.remove(item)
        out = {"removed": item["uuid"]}
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
