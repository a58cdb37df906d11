"""The systemd driver on a node, with FakeSystemd standing in for systemd (tests/service/
fakes.py says why and what it models)."""

import copy
import os
import stat
import uuid

import pytest

from appliance.agent.targets import View
from appliance.service import targets
from appliance.service.node import Driver
from state import Store

from .fakes import FakeHost
from .test_unit import PROJECT, service

NODE = str(uuid.uuid4())


@pytest.fixture
def store(tmp_path):
    store = Store(str(tmp_path / "state"))
    store.collection("compute_nodes").insert({"uuid": NODE, "name": "n",
                                              "project_id": PROJECT})
    yield store
    store.close()


@pytest.fixture
def host(tmp_path):
    return FakeHost(tmp_path / "root", NODE)


def item_of(store, svc_uuid):
    node = store.collection("compute_nodes").get(NODE)
    return next(i for i in targets.for_node(View(store), node) if i["master"] == svc_uuid)


def add(store, **fields):
    return store.collection("em_services").insert(service(target={"kind": "node",
                                                                  "node": NODE}, **fields))


def change(store, svc, **fields):
    store.collection("em_services").update(svc["uuid"], fields)


def test_a_simple_service_is_written_enabled_and_started(store, host):
    svc = add(store)
    item = item_of(store, svc["uuid"])
    unit = item["value"]["unit"]
    actual = Driver(host).apply(item, None)
    assert actual == {"status": "ACTIVE", "reason": None, "value": {
        "active_state": "active", "exit_code": None, "holder": False}}
    path = host.path(f"/etc/systemd/system/{unit}")
    with open(path) as f:
        assert f.read() == item["value"]["text"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert host.systemd.verbs() == ["daemon-reload", "enable", "restart"]
    assert host.systemd.units[unit]["enabled"] and host.systemd.running(unit)
    assert [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".")] == []


def test_the_same_item_again_changes_nothing(store, host):
    svc = add(store)
    item = item_of(store, svc["uuid"])
    driver = Driver(host)
    driver.apply(item, None)
    invocation = host.systemd.units[item["value"]["unit"]]["InvocationID"]
    host.systemd.calls.clear()
    assert driver.apply(copy.deepcopy(item), item)["status"] == "ACTIVE"
    assert "daemon-reload" not in host.systemd.verbs()
    assert host.systemd.units[item["value"]["unit"]]["InvocationID"] == invocation


def test_actions_restart_update_and_stop(store, host):
    svc = add(store)
    driver = Driver(host)
    applied = item_of(store, svc["uuid"])
    driver.apply(applied, None)
    unit = applied["value"]["unit"]

    def step(**fields):
        nonlocal applied
        change(store, svc, **fields)
        item = item_of(store, svc["uuid"])
        host.systemd.calls.clear()
        actual = driver.apply(item, applied)
        applied = item
        return actual

    step(restart_counter=1)
    assert host.systemd.verbs() == ["enable", "restart"]
    step(update_counter=1)
    assert host.systemd.verbs() == ["enable", "start", "try-restart"]
    actual = step(target_status="stopped")
    assert host.systemd.verbs() == ["enable", "stop"]
    assert actual["status"] == "ACTIVE" and actual["value"]["active_state"] == "inactive"
    step(target_status="disabled")
    assert not host.systemd.units[unit]["enabled"]
    step(target_status="started")
    assert host.systemd.verbs() == ["disable", "start"] and host.systemd.running(unit)
    # a new command: a new unit text, reloaded, and the unit restarted on it
    step(path="exec sleep 5")
    assert host.systemd.verbs() == ["daemon-reload", "disable", "restart"]


def test_a_oneshot_reports_its_exit_code(store, host):
    svc = add(store, path="echo hello; exit 3", service_type={"kind": "oneshot"})
    item = item_of(store, svc["uuid"])
    driver = Driver(host)
    first = driver.apply(item, None)
    assert first["status"] == "IN_PROGRESS" and first["value"]["exit_code"] is None
    (done,) = driver.tick([item])
    assert done["uuid"] == item["uuid"] and done["status"] == "ERROR"
    assert done["value"]["exit_code"] == 3 and "exit code 3" in done["reason"]
    assert driver.tick([item]) == []            # nothing moved since
    change(store, svc, path="true")
    fixed = item_of(store, svc["uuid"])
    driver.apply(fixed, item)
    (ok,) = driver.tick([fixed])
    assert ok["status"] == "ACTIVE" and ok["value"]["exit_code"] == 0
    # re-applying the same item does not run it again
    runs = host.systemd.units[fixed["value"]["unit"]]["InvocationID"]
    driver.apply(copy.deepcopy(fixed), fixed)
    assert host.systemd.units[fixed["value"]["unit"]]["InvocationID"] == runs


def test_a_crash_is_reported_by_tick(store, host):
    svc = add(store)
    item = item_of(store, svc["uuid"])
    driver = Driver(host)
    driver.apply(item, None)
    assert driver.tick([item]) == []
    host.systemd.fail(item["value"]["unit"])
    (failed,) = driver.tick([item])
    assert failed["status"] == "ERROR" and "signal" in failed["reason"]


def test_a_renamed_service_replaces_its_unit_and_remove_cleans_up(store, host):
    svc = add(store)
    old = item_of(store, svc["uuid"])
    driver = Driver(host)
    driver.apply(old, None)
    change(store, svc, name="renamed")
    new = item_of(store, svc["uuid"])
    assert driver.apply(new, old)["status"] == "ACTIVE"
    assert not os.path.exists(host.path(f"/etc/systemd/system/{old['value']['unit']}"))
    assert not host.systemd.running(old["value"]["unit"])
    assert host.systemd.running(new["value"]["unit"])
    host.systemd.calls.clear()
    driver.remove(new)
    assert not os.path.exists(host.path(f"/etc/systemd/system/{new['value']['unit']}"))
    assert host.systemd.verbs() == ["stop", "disable", "daemon-reload", "reset-failed"]
    driver.remove(new)                          # again: nothing left to do
    assert host.systemd.verbs() == ["stop", "disable", "daemon-reload", "reset-failed"]


def test_a_removed_failed_unit_is_forgotten(store, host):
    """systemd keeps a failed unit listed ("not-found failed") after its file is gone,
    until reset-failed: seen in the guest (tests/image/test_guest_agent.py)."""
    svc = add(store, path="exit 3", service_type={"kind": "oneshot"})
    item = item_of(store, svc["uuid"])
    driver = Driver(host)
    driver.apply(item, None)
    (done,) = driver.tick([item])
    assert done["value"]["exit_code"] == 3
    assert host.systemd.units[item["value"]["unit"]]["ActiveState"] == "failed"
    driver.remove(item)
    assert item["value"]["unit"] not in host.systemd.units


def test_a_systemctl_failure_is_an_error_result(store, host):
    svc = add(store)
    item = item_of(store, svc["uuid"])

    def broken(*args):
        return (0, "") if args[0] == "daemon-reload" else (1, "Access denied")
    host.systemctl = broken
    actual = Driver(host).apply(item, None)
    assert actual["status"] == "ERROR" and "Access denied" in actual["reason"]


NOT_BOOTED = ("System has not been booted with systemd as init system (PID 1). "
              "Can't operate.\nFailed to connect to bus: Host is down\n")


@pytest.mark.parametrize("answer", [(1, NOT_BOOTED), (127, "No such file or directory")])
def test_without_systemd_a_service_is_an_error_said_once(store, host, answer, caplog):
    """A host whose PID 1 is not systemd (make run's development node): systemctl's own
    answer there (or no systemctl at all) stands in for systemd."""
    from appliance.service.node import NO_SYSTEMD
    svc = add(store)
    item = item_of(store, svc["uuid"])
    calls = []

    def no_systemd(*args):
        calls.append(args)
        return answer
    host.systemctl = no_systemd
    driver = Driver(host)
    actual = driver.apply(item, None)
    assert (actual["status"], actual["reason"]) == ("ERROR", NO_SYSTEMD)
    applied = {**item, "actual": actual}
    with caplog.at_level("INFO"):
        ticks = [driver.tick([applied]) for _ in range(5)]
    # the status was already reported by apply: no tick reports it again, none warns
    assert ticks == [[]] * 5
    assert not [r for r in caplog.records if "systemctl" in r.getMessage()]
    assert len([r for r in caplog.records if NO_SYSTEMD in r.getMessage()]) == 1
    assert len(calls) > 5                       # the ticks did ask
    driver.remove(item)                         # and a remove does not fail either
    assert not os.path.exists(driver.unit_path(item["value"]["unit"]))
