"""The capability descriptors (appliance/capability.py) and the one list of them
(appliance/capabilities.py): each is well formed, names code that exists, costs nothing to
read, and the tables the rest of the appliance uses are exactly what they declare."""

import ast
import importlib
import importlib.util
import inspect
import os
import subprocess
import sys

import pytest

from appliance import capabilities, config
from appliance.capability import Capability, Daemon, NodeSets, Target, load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DESCRIPTORS = capabilities.descriptors()
IDS = [c.name for c in DESCRIPTORS]


def test_every_listed_package_exports_its_descriptor():
    assert capabilities.PACKAGES, "the list is empty"
    assert len(set(capabilities.PACKAGES)) == len(capabilities.PACKAGES)
    for name, capability in zip(capabilities.PACKAGES, DESCRIPTORS, strict=True):
        assert isinstance(capability, Capability), name
        assert capability.name == name


def test_every_capability_package_is_listed():
    """A package with a CAPABILITY that the list forgot would be silently left out."""
    folder = os.path.join(ROOT, "appliance")
    declaring = set()
    for entry in sorted(os.listdir(folder)):
        init = os.path.join(folder, entry, "__init__.py")
        if os.path.exists(init):
            with open(init) as f:
                if "CAPABILITY = " in f.read():
                    declaring.add(entry)
    assert declaring == set(capabilities.PACKAGES)


@pytest.mark.parametrize("capability", DESCRIPTORS, ids=IDS)
def test_every_path_a_descriptor_names_imports(capability):
    importlib.import_module(capability.resources)
    assert callable(load(capability.register))
    for target in capability.targets:
        assert isinstance(target, Target)
        assert callable(load(target.producer)) and inspect.isclass(load(target.driver))
        if target.unplaced:
            assert target.master, "only a master is placed"
            assert callable(load(target.unplaced))
    for daemon in capability.daemons:
        assert isinstance(daemon, Daemon)
        assert importlib.util.find_spec(f"daemons.{daemon.name}") is not None, daemon.name
        assert isinstance(daemon.on_demand, tuple)
        assert daemon.on_demand or daemon.on_demand_masters or not daemon.is_work
        if daemon.is_work:
            assert callable(load(daemon.is_work))
    if capability.seed:
        assert list(inspect.signature(load(capability.seed)).parameters)[:2] == [
            "store", "settings"]
    for sets in capability.node_sets:
        assert isinstance(sets, NodeSets) and isinstance(sets.watches, tuple)
        assert callable(load(sets.reconcile))
    if capability.builtin_element:
        element = importlib.import_module(capability.builtin_element)
        assert element.NAME and element.VERSION and element.COLLECTIONS
        assert callable(element.exports)


def test_reading_the_descriptors_imports_none_of_their_code():
    """The daemons and the node agent read the list (DAEMONS, the agent's tables): it must
    load only the packages' __init__ modules, never their resources, nor the API."""
    code = ("import sys, daemons\n"
            "from appliance import capabilities\n"
            "capabilities.descriptors()\n"
            "print('\\n'.join(sys.modules))")
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}).stdout.split()
    packages = {f"appliance.{name}" for name in capabilities.PACKAGES}
    deeper = [m for m in out if m.rpartition(".")[0] in packages]
    assert deeper == []
    assert {"bottle", "appliance.api", "state", "jsonschema"}.isdisjoint(out)


def test_the_app_registers_exactly_the_list():
    from appliance import app
    assert app.capabilities() == DESCRIPTORS


def test_the_agent_s_tables_are_the_declared_targets():
    from appliance.agent import capabilities as agent
    targets = [t for c in DESCRIPTORS for t in c.targets]
    assert len({t.kind for t in targets}) == len(targets), "a target kind declared twice"
    assert agent.PRODUCERS == {t.kind: t.producer for t in targets}
    assert agent.DRIVERS == {t.kind: t.driver for t in targets}
    assert agent.MASTERS == {t.kind: t.master for t in targets if t.master}
    assert agent.PLACEMENT == {t.master: t.unplaced for t in targets if t.unplaced}
    from appliance.agent import status
    reads = {kind for t in targets for kind in t.reads}
    assert set(agent.READS) == reads and len(agent.READS) == len(reads)
    assert reads <= set(status.watched_kinds())


def test_the_daemons_are_the_declared_ones_each_with_its_units():
    import daemons
    declared = [d for c in DESCRIPTORS + [capabilities.PLATFORM] for d in c.daemons]
    assert daemons.DAEMONS == [d.name for d in declared]
    assert len(set(daemons.DAEMONS)) == len(daemons.DAEMONS), "a daemon declared twice"
    on_demand = [d for d in declared if d.on_demand or d.on_demand_masters]
    assert set(daemons.ON_DEMAND) == {d.name for d in on_demand}
    masters = {t.master for c in DESCRIPTORS for t in c.targets if t.master}
    for daemon in on_demand:
        kinds = set(daemon.on_demand) | (masters if daemon.on_demand_masters else set())
        assert set(daemons.ON_DEMAND[daemon.name]) == kinds
    assert daemons.IS_WORK == {d.name: d.is_work for d in declared if d.is_work}
    # the hand-written units of systemd/: one service per declared daemon, and a path
    # unit exactly for those started on demand (their contents: tests/firstboot/test_units.py)
    units = os.listdir(os.path.join(ROOT, "systemd"))
    services = {u[len("appliance-"):-len(".service")] for u in units if u.endswith(".service")}
    # and the waker of the daemons asleep with a timer (appliance-wake, state/wake.py)
    assert services == set(daemons.DAEMONS) | {"api", "firstboot", "wake"}
    paths = {u[len("appliance-"):-len(".path")] for u in units if u.endswith(".path")}
    assert paths == set(daemons.ON_DEMAND) | {"wake"}


def _core_settings():
    """The keys written in config.py's own DEFAULTS literal."""
    with open(os.path.join(ROOT, "appliance", "config.py")) as f:
        tree = ast.parse(f.read())
    literal = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                   and [t.id for t in node.targets] == ["DEFAULTS"])
    return {k.value for k in literal.keys if k is not None}


def test_the_settings_are_the_declared_ones_and_none_shadows_another():
    declared = capabilities.settings()
    assert declared, "no capability declares a setting"
    assert _core_settings().isdisjoint(declared)
    for name, default in declared.items():
        assert name in config.DEFAULTS and config.DEFAULTS[name] == default, name
        assert type(config.DEFAULTS[name]) is type(default)


def test_compute_makes_the_declared_sets_and_watches_their_kinds():
    from appliance.compute import reconcile
    sets = [s for c in DESCRIPTORS for s in c.node_sets]
    assert reconcile._reconcile_owned_sets() == [load(s.reconcile) for s in sets]
    assert {k for s in sets for k in s.watches} <= set(reconcile.KINDS)


def test_the_built_in_elements_are_core_and_the_declared_ones():
    from appliance.em import builtin
    declared = [importlib.import_module(c.builtin_element).NAME for c in DESCRIPTORS
                if c.builtin_element]
    assert list(builtin.BUILTIN) == ["core", *declared]
