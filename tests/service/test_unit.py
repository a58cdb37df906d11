"""Unit rendering (pure) and the services producer over a real store."""

import re
import shutil
import subprocess
import uuid

import pytest

from appliance.agent.protocol import item_hash, target_uuid
from appliance.agent.targets import View
from appliance.service import targets, unit
from state import Store

A, B = str(uuid.uuid4()), str(uuid.uuid4())
# services and the nodes they target share a project: a service lands only on its own
# project's nodes (appliance/tenancy/nodes.py, lands_on)
PROJECT = str(uuid.uuid4())


def service(**fields):
    return {"uuid": str(uuid.uuid4()), "name": "web", "path": "sleep infinity",
            "user": "root", "group": None, "service_type": {"kind": "simple", "count": 1},
            "before": [], "after": [], "target_status": "enabled",
            "project_id": PROJECT, "target": {"kind": "node", "node": A}, **fields}


def directives(text, key):
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


def systemd_argv(value):
    """An Exec line's value read as systemd 252 reads it: specifiers (`%%` is `%`; any
    other specifier would be expanded), then words split with C unescaping inside
    quotes, then `$$` is `$` (a lone `$NAME` would be an environment variable)."""
    if re.search(r"%[^%]", value.replace("%%", "")):
        raise AssertionError(f"a specifier would be expanded in {value!r}")
    value = value.replace("%%", "%")
    words, i = [], 0
    while i < len(value):
        if value[i] == " ":
            i += 1
            continue
        word = ""
        if value[i] == '"':
            i += 1
            while value[i] != '"':
                if value[i] == "\\":
                    i += 1
                word += value[i]
                i += 1
            i += 1
        else:
            while i < len(value) and value[i] != " ":
                word += value[i]
                i += 1
        if re.search(r"\$[^$]", word.replace("$$", "")):
            raise AssertionError(f"an environment variable would be expanded in {word!r}")
        words.append(word.replace("$$", "$"))
    return words


def test_unit_names():
    svc, item = service(), str(uuid.uuid4())
    assert unit.unit_name(svc, item) == f"appliance-srv-web-{item}.service"
    assert unit.unit_name({**svc, "name": ""}, item) == f"appliance-srv-{item}.service"


def test_simple_and_oneshot_units():
    text = unit.render(service(user="www-data", group="adm"))
    assert directives(text, "Type") == ["simple"] and directives(text, "Restart") == ["always"]
    assert directives(text, "User") == ["www-data"] and directives(text, "Group") == ["adm"]
    assert directives(text, "WantedBy") == ["multi-user.target"]
    assert systemd_argv(directives(text, "ExecStart")[0]) == [
        "/bin/sh", "-c", "sleep infinity"]
    for kind in ("oneshot", "monopoly_oneshot"):
        text = unit.render(service(service_type={"kind": kind}))
        assert directives(text, "Type") == ["oneshot"] and directives(text, "Restart") == ["no"]
        assert directives(text, "Group") == []
    assert directives(unit.render(service(service_type={"kind": "monopoly", "count": 1})),
                      "Type") == ["simple"]


HOSTILE = [
    "echo 'single' \"double\" `date` $(id -u) $HOME ${PATH} $$ 100% %n %%",
    "printf '%s\\n' a\\\\b \\\"q\\\" ; exit 3",
    "echo trailing backslash \\",
    "echo ;",
    "a=1; echo \"$a\" '$a' \\$a",
    "echo \u00e9t\u00e9 \u2603",
]


@pytest.mark.parametrize("command", HOSTILE)
def test_hostile_commands_reach_the_shell_unchanged(command, tmp_path):
    svc = service(path=command, before=[{"kind": "shell", "command": command}],
                  after=[{"kind": "shell", "command": command}])
    text = unit.render(svc)
    for key in ("ExecStart", "ExecStartPre", "ExecStartPost"):
        (value,) = directives(text, key)
        value = value[1:] if key != "ExecStart" else value
        assert systemd_argv(value) == ["/bin/sh", "-c", command]
    if shutil.which("systemd-analyze"):
        # systemd's own parser: it refuses a unit whose quoting does not balance
        path = tmp_path / unit.unit_name(svc, str(uuid.uuid4()))
        path.write_text(text)
        done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                              capture_output=True, text=True)
        assert done.returncode == 0 and "quot" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["echo a\necho b", "echo \r", "tab\there", "nul\x00"])
def test_control_characters_are_refused(command):
    with pytest.raises(unit.UnitError):
        unit.render(service(path=command))
    with pytest.raises(unit.UnitError):
        unit.render(service(after=[{"kind": "shell", "command": command}]))


def test_an_account_that_is_not_a_name_is_refused():
    with pytest.raises(unit.UnitError):
        unit.render(service(user="root\nExecStart=/bin/evil"))


def test_service_ordering_names_the_other_units_on_the_node():
    first, second, elsewhere = service(), service(), service()
    units = {s["uuid"]: unit.unit_name(s, str(uuid.uuid4())) for s in (first, second)}
    svc = service(before=[{"kind": "service", "service": first["uuid"]},
                          {"kind": "service", "service": elsewhere["uuid"]},
                          {"kind": "shell", "command": "echo pre"}],
                  after=[{"kind": "service", "service": second["uuid"]}])
    text = unit.render(svc, units)
    assert directives(text, "After") == [f"network.target {units[first['uuid']]}"]
    assert directives(text, "Before") == [units[second["uuid"]]]
    assert directives(text, "ExecStartPre") == ['+/bin/sh -c "echo pre"']
    assert elsewhere["uuid"] not in text


# ---- the producer ---------------------------------------------------------------------

@pytest.fixture
def store(tmp_path):
    store = Store(str(tmp_path))
    nodes = store.collection("compute_nodes")
    nodes.insert({"uuid": A, "name": "a", "node_set": None, "project_id": PROJECT})
    nodes.insert({"uuid": B, "name": "b", "node_set": "/v1/compute/sets/" + SET,
                  "project_id": PROJECT})
    yield store
    store.close()


SET = str(uuid.uuid4())


def node(store, uuid):
    return store.collection("compute_nodes").get(uuid)


def test_producer_items_per_node(store):
    services = store.collection("em_services")
    on_a = services.insert(service())
    on_both = services.insert(service(name="both", target={"kind": "nodes", "nodes": [A, B]},
                                      before=[{"kind": "service", "service": on_a["uuid"]}]))
    on_set = services.insert(service(name="set", target={"kind": "node_set", "node_set": SET},
                                     service_type={"kind": "monopoly", "count": 1},
                                     target_status="stopped"))
    view = View(store)
    items_a = {i["master"]: i for i in targets.for_node(view, node(store, A))}
    items_b = {i["master"]: i for i in targets.for_node(view, node(store, B))}
    assert set(items_a) == {on_a["uuid"], on_both["uuid"]}
    assert set(items_b) == {on_both["uuid"], on_set["uuid"]}
    both_a = items_a[on_both["uuid"]]
    assert both_a["uuid"] == target_uuid(A, "service", on_both["uuid"])
    assert both_a["kind"] == "service" and both_a["master_kind"] == "em_services"
    # on a, the other service runs too: the unit is ordered after it; on b it is not there
    on_a_unit = unit.unit_name(on_a, target_uuid(A, "service", on_a["uuid"]))
    assert on_a_unit in directives(both_a["value"]["text"], "After")[0]
    assert on_a["uuid"] not in items_b[on_both["uuid"]]["value"]["text"]
    # per node: one service's units on a and b differ (two agents on one systemd)
    assert both_a["value"]["unit"] == unit.unit_name(on_both, both_a["uuid"])
    assert both_a["value"]["unit"] != items_b[on_both["uuid"]]["value"]["unit"]
    mono = items_b[on_set["uuid"]]["value"]
    assert mono["monopoly"] and not mono["oneshot"]
    assert mono["boot"] is False and mono["run"] is False
    assert both_a["value"]["boot"] and both_a["value"]["run"]


def test_an_action_changes_the_item_hash(store):
    services = store.collection("em_services")
    svc = services.insert(service())
    view = View(store)
    (before,) = targets.for_node(view, node(store, A))
    services.update(svc["uuid"], {"restart_counter": 1})
    (after,) = targets.for_node(view, node(store, A))
    assert after["value"]["restart"] == 1 and item_hash(after) != item_hash(before)
    services.update(svc["uuid"], {"status": "ACTIVE", "node_status": {A: {}}})
    (same,) = targets.for_node(view, node(store, A))
    assert item_hash(same) == item_hash(after)      # the status step moves no node
