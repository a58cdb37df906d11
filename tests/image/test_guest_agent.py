"""Issue 14's real-systemd must-shows, in the appliance image booted once by `box` (TCG),
through the API over the forwarded HTTPS port (tests/service/test_agent_e2e.py runs the
same checks on the host with a fake systemd):

- the appliance's own agent (enrolled at first boot) runs and delivers a config;
- a second agent in the same guest, as a second HW node: created and enrolled through the
  API and `appliance agent enroll`, run as its own transient unit with the packaged unit's
  environment. Both agents share one systemd: unit names are per node and service
  (docs/services.md, "Units");
- services: After=/Before= ordering and shell entries in `systemctl show`, a oneshot's exit
  code in the status, a monopoly on both nodes that moves when its holder's agent is killed,
  and the stop/start/restart actions reaching systemd.

The tests build on each other in file order (the second agent, then the services on both).
"""

import json
import shlex
import subprocess
import time
import uuid

import pytest

from appliance.agent.protocol import target_uuid
from appliance.service.unit import unit_name
from tests import waiting

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

NODES = "/v1/compute/nodes"
SVC = "/v1/em/services"
CONFIGS = "/v1/config/configs"
AGENT = "appliance-agent.service"          # the packaged unit, the appliance's node
AGENT_B = "appliance-agent-b.service"      # the second node's, a transient unit
CRED_B = "/etc/appliance/agent-b.json"
STATE_B = "/var/lib/appliance-agent-b"
# a change through the API reaches a unit of the TCG guest and comes back as a status:
# long poll, driver, systemctl, report, the status daemon's step (the daemon started by
# the first write to a master kind, docs/on-demand-daemons.md), all slow here. A bound,
# not an expectation: 120 s ran out once (four services' units removed) with three CIs
# and a benchmark on the machine, where the test took 362 s
CONVERGE = 300
# the lease (service_lease_seconds, 10 s) plus a margin: the standby asks every second,
# one lease call and one `systemctl start` in the TCG guest on a busy 2-core machine take a
# second or two each, and the tick that notices runs about every second; with two CIs
# and a benchmark on the machine (load 15-18) the take-over came 28.9 s after the kill.
# The order (fenced before taken) is asserted exactly; this bounds only how late
LEASE, MARGIN = 10, 30


def eventually(check, seconds=CONVERGE, what=""):
    """A check whose SSH command into the guest timed out counts as "not yet": a TCG
    guest on a loaded host can take minutes to answer one (seen beside a second boot)."""
    def patient():
        try:
            return check()
        except subprocess.TimeoutExpired:
            return None
    return waiting.eventually(patient, seconds, what, interval=0.5)


def created(resp):
    assert resp.status == 201, resp
    return resp.json


@pytest.fixture(scope="module")
def nodes(box):
    """(admin client, the appliance's node record, the second HW node's record); the
    second node's agent runs as AGENT_B for the module's tests."""
    admin = box.admin()
    cred = json.loads(box.ssh("cat /etc/appliance/agent.json").stdout)
    resp = admin.get(f"{NODES}/{cred['node']}")
    assert resp.status == 200, resp
    own = resp.json
    second = created(admin.post(NODES, {
        "name": f"hw-b-{uuid.uuid4().hex[:6]}", "cores": 1, "ram": 1024, "node_type": "HW",
        "project_id": own["project_id"]}))
    minted = admin.post(f"{NODES}/{second['uuid']}/actions/enroll/invoke")
    assert minted.status == 200, minted
    # in the guest, as an admin would on the machine; the endpoint is the one the
    # appliance's own agent uses (loopback HTTP to the API)
    box.ssh(f"/opt/appliance/venv/bin/appliance agent enroll "
            f"--endpoint {shlex.quote(cred['endpoint'])} --token {minted.json['token']} "
            f"--state-dir {STATE_B} --credential-file {CRED_B}")
    start_agent_b(box)
    yield admin, own, second
    box.ssh(f"systemctl stop {AGENT_B}; systemctl reset-failed {AGENT_B}", check=False)


def start_agent_b(box):
    """The packaged unit's environment and working directory
    (systemd/appliance-agent.service), with this agent's own credential and state; no
    Restart= (a transient unit's default is no): a killed agent stays down."""
    box.ssh(f"systemd-run --unit={AGENT_B} --property=User=root "
            f"--property=EnvironmentFile=-/etc/appliance/environment "
            f"--property=WorkingDirectory=/opt/appliance "
            f"--setenv=APPLIANCE_AGENT_CREDENTIAL_FILE={CRED_B} "
            f"--setenv=APPLIANCE_AGENT_STATE_DIR={STATE_B} "
            f"/opt/appliance/venv/bin/python -P -m daemons.agent")


def unit_of(service, node):
    return unit_name(service, target_uuid(node["uuid"], "service", service["uuid"]))


def service_body(node, **fields):
    return {"name": f"g{uuid.uuid4().hex[:8]}", "project_id": node["project_id"],
            "path": "sleep infinity", "target": {"kind": "node", "node": node["uuid"]},
            "service_type": {"kind": "simple"}, **fields}


def record(admin, path):
    resp = admin.get(path)
    assert resp.status == 200, resp
    return resp.json


def status_is(admin, path, wanted):
    return lambda: (r := record(admin, path))["status"] == wanted and r


def active(box, unit):
    return box.show(unit, "ActiveState")["ActiveState"] == "active"


def test_the_appliance_agent_delivers_a_config(box, nodes):
    admin, own, _ = nodes
    assert box.ssh(f"systemctl is-active {AGENT}").stdout.strip() == "active"
    path = f"/etc/guest-test/{uuid.uuid4().hex[:8]}.conf"
    config = created(admin.post(CONFIGS, {
        "name": "guest-config", "project_id": own["project_id"], "path": path,
        "target": {"kind": "node", "node": own["uuid"]}, "owner": "daemon",
        "group": "daemon", "mode": "0640", "body": {"kind": "text", "content": "hi\n"}}))
    done = eventually(status_is(admin, f"{CONFIGS}/{config['uuid']}", "ACTIVE"),
                      what="config ACTIVE")
    assert done["node_status"][own["uuid"]]["status"] == "ACTIVE"
    assert box.ssh(f"stat -c '%U %G %a' {path}").stdout.split() == ["daemon", "daemon", "640"]
    assert box.ssh(f"cat {path}").stdout == "hi\n"


def test_a_second_agent_runs_as_its_own_node(box, nodes):
    admin, _, second = nodes
    assert box.ssh(f"systemctl is-active {AGENT_B}").stdout.strip() == "active"
    cred = json.loads(box.ssh(f"cat {CRED_B}").stdout)
    assert cred["node"] == second["uuid"] and cred["state_dir"] == STATE_B
    assert box.ssh(f"stat -c %a {CRED_B}").stdout.strip() == "600"
    # its agent record, made by the enrollment, names its node
    assert record(admin, f"/v1/ua/agents/{cred['agent']}")["node"] == second["uuid"]
    # it has polled and reported: its state file is in its own directory
    eventually(lambda: box.ssh(f"test -s {STATE_B}/applied.json", check=False).returncode
               == 0, what="the second agent's state")


def test_units_show_their_ordering_and_shell_entries(box, nodes):
    admin, own, second = nodes
    db = created(admin.post(SVC, service_body(own, name="db")))
    cache = created(admin.post(SVC, service_body(own, name="cache")))
    web = created(admin.post(SVC, service_body(own, name="web", before=[
        {"kind": "service", "service": db["uuid"]},
        {"kind": "shell", "command": "echo pre-web"}], after=[
        {"kind": "service", "service": cache["uuid"]},
        {"kind": "shell", "command": "echo post-web"}])))
    for svc in (db, cache, web):
        eventually(status_is(admin, f"{SVC}/{svc['uuid']}", "ACTIVE"), what=svc["name"])
    shown = box.show(unit_of(web, own), "After", "Before", "ExecStartPre", "ExecStartPost",
                     "ActiveState")
    assert unit_of(db, own) in shown["After"].split()
    assert unit_of(cache, own) in shown["Before"].split()
    assert "echo pre-web" in shown["ExecStartPre"]
    assert "echo post-web" in shown["ExecStartPost"]
    assert shown["ActiveState"] == "active"
    # one service on both nodes: two units in the one systemd, one per agent
    both = created(admin.post(SVC, service_body(own, target={
        "kind": "nodes", "nodes": [own["uuid"], second["uuid"]]})))
    done = eventually(status_is(admin, f"{SVC}/{both['uuid']}", "ACTIVE"), what="on both")
    assert set(done["node_status"]) == {own["uuid"], second["uuid"]}
    assert unit_of(both, own) != unit_of(both, second)
    assert active(box, unit_of(both, own)) and active(box, unit_of(both, second))
    for svc in (web, cache, db, both):
        assert admin.delete(f"{SVC}/{svc['uuid']}").status == 204
    eventually(lambda: not box.ssh("ls /etc/systemd/system/ | grep -q '^appliance-srv-'",
                                   check=False).returncode == 0, what="units removed")


def test_a_oneshot_exit_code_reaches_its_status(box, nodes):
    admin, own, _ = nodes
    svc = created(admin.post(SVC, service_body(own, path="exit 3",
                                               service_type={"kind": "oneshot"})))
    failed = eventually(status_is(admin, f"{SVC}/{svc['uuid']}", "ERROR"), what="ERROR")
    assert failed["node_status"][own["uuid"]]["exit_code"] == 3
    assert "exit code 3" in failed["status_reason"]
    assert box.show(unit_of(svc, own), "ExecMainStatus")["ExecMainStatus"] == "3"
    assert admin.delete(f"{SVC}/{svc['uuid']}").status == 204


def test_actions_reach_systemd(box, nodes):
    admin, own, _ = nodes
    svc = created(admin.post(SVC, service_body(own)))
    path, unit = f"{SVC}/{svc['uuid']}", unit_of(svc, own)
    eventually(status_is(admin, path, "ACTIVE"), what="started")
    first = box.show(unit, "InvocationID", "ExecMainStartTimestamp")
    assert admin.post(f"{path}/actions/restart/invoke").status == 200
    eventually(lambda: box.show(unit, "InvocationID")["InvocationID"]
               not in ("", first["InvocationID"]) and active(box, unit), what="restarted")
    assert box.show(unit, "ExecMainStartTimestamp") != first["ExecMainStartTimestamp"]
    assert admin.post(f"{path}/actions/stop/invoke").status == 200
    eventually(lambda: box.show(unit, "ActiveState")["ActiveState"] == "inactive",
               what="stopped")
    # "stopped" keeps the unit enabled at boot (docs/services.md)
    assert box.ssh(f"systemctl is-enabled {unit}").stdout.strip() == "enabled"
    assert admin.post(f"{path}/actions/start/invoke").status == 200
    eventually(lambda: active(box, unit), what="started again")
    assert admin.delete(path).status == 204


NO_RESTART = f"/run/systemd/system/{AGENT}.d/zz-test-no-restart.conf"


@pytest.fixture
def agent_stays_down(box):
    """The packaged agent's unit restarts on failure after 1 s, and its new process would
    take its own lease back before it expired: a runtime drop-in (in /run, gone at reboot,
    removed after the test) sets Restart=no. Put in before the monopoly exists: the
    daemon-reload it needs is slow in the TCG guest and stalls the agents' systemctl
    calls, which must not happen between the renewals and the kill."""
    box.ssh(f"mkdir -p {NO_RESTART.rsplit('/', 1)[0]} && "
            f"printf '[Service]\\nRestart=no\\n' > {NO_RESTART} && systemctl daemon-reload")
    assert box.show(AGENT, "Restart")["Restart"] == "no"
    yield
    box.ssh(f"rm -f {NO_RESTART} && systemctl daemon-reload")


def revive(box, agent):
    box.ssh(f"systemctl reset-failed {agent}")
    if agent == AGENT_B:
        start_agent_b(box)      # a transient unit is gone once its failure is reset
    else:
        box.ssh(f"systemctl start {agent}")


def monotonic(box, unit, prop):
    """A unit's timestamp on the guest's monotonic clock, in seconds (every unit of the
    one systemd on the same clock: the order of two events, and the time between them)."""
    return int(box.show(unit, prop)[prop]) / 1e6


def stopped_at(box, unit):
    """When systemd last stopped `unit` (its stop job's journal entry), on the same clock:
    a stopped service unit that nothing references is unloaded at once, and `systemctl
    show` then knows no timestamps."""
    out = box.ssh(f"journalctl -u {unit} -o json --no-pager").stdout
    stops = [json.loads(line) for line in out.splitlines() if '"JOB_TYPE"' in line]
    stops = [e for e in stops if e.get("JOB_TYPE") == "stop"]
    assert stops, f"no stop of {unit} in the journal"
    return int(stops[-1]["__MONOTONIC_TIMESTAMP"]) / 1e6


def test_a_monopoly_moves_when_its_agent_is_killed(box, nodes, agent_stays_down):
    admin, own, second = nodes
    svc = created(admin.post(SVC, service_body(own, service_type={"kind": "monopoly"},
                                               target={"kind": "nodes", "nodes": [
                                                   own["uuid"], second["uuid"]]})))
    path = f"{SVC}/{svc['uuid']}"
    agents = {own["uuid"]: AGENT, second["uuid"]: AGENT_B}
    units = {n["uuid"]: unit_of(svc, n) for n in (own, second)}
    eventually(lambda: [active(box, u) for u in units.values()].count(True) == 1,
               what="one holder")
    holder = next(n for n, u in units.items() if active(box, u))
    other = next(n for n in units if n != holder)
    done = eventually(lambda: (r := record(admin, path))["node_status"].get(
        holder, {}).get("holder") and r, what="the holder reported")
    assert not done["node_status"][other].get("holder")
    # the fence: the unit is bound to its agent's unit
    assert agents[holder] in box.show(units[holder], "BindsTo")["BindsTo"].split()
    # renewals keep it where it is for more than a lease
    for _ in range(LEASE // 2):
        time.sleep(2)
        assert active(box, units[holder]) and not active(box, units[other])

    box.ssh(f"systemctl kill -s KILL {agents[holder]}")
    try:
        eventually(lambda: active(box, units[other]), seconds=LEASE + MARGIN,
                   what="taken over by the other node within the lease")
        killed = monotonic(box, agents[holder], "ExecMainExitTimestampMonotonic")
        fenced = stopped_at(box, units[holder])
        taken = monotonic(box, units[other], "ActiveEnterTimestampMonotonic")
        print(f"\nmonopoly: holder's unit stopped {fenced - killed:.2f} s after its agent "
              f"was killed; the other node's unit active {taken - killed:.2f} s after it "
              f"(lease {LEASE} s)")
        # the old copy stopped with its agent (BindsTo), before the new one started
        assert not active(box, units[holder])
        assert killed <= fenced < taken
        assert taken - killed <= LEASE + MARGIN
        moved = eventually(lambda: (r := record(admin, path))["node_status"].get(
            other, {}).get("holder") and r, what="the new holder reported")
        assert moved["node_status"][other]["status"] == "ACTIVE"
    finally:
        revive(box, agents[holder])
    # the killed agent is back: the lease is the other's, its unit stays down
    eventually(lambda: box.ssh(f"systemctl is-active {agents[holder]}", check=False)
               .stdout.strip() == "active", what="the agent back")
    time.sleep(LEASE)
    assert active(box, units[other]) and not active(box, units[holder])
    assert admin.delete(path).status == 204
