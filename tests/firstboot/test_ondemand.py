"""Daemons started on first use (appliance/firstboot/ondemand.py, daemons.ON_DEMAND): which
have work in a state, what first boot asks systemd to start, and that the table names the
kinds each daemon really reconciles. The path units themselves are checked in
test_units.py, and live in the booted image (tests/image/test_appliance_boot.py)."""

import os
import subprocess

import pytest

from appliance import config
from appliance.bootstrap import bootstrap
from appliance.firstboot import ondemand
from daemons import DAEMONS, ON_DEMAND
from state import Store
from state.collection import LOCK_DIR
from tests.apiserver import ApiServer
from tests.firstboot.test_firstboot import boot, make_paths, settings_for

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
PASSWORD = "on-demand-password"


@pytest.fixture
def state_dir(tmp_path):
    settings = config.load(environ={}, overrides={"state_dir": str(tmp_path / "state"),
                                                  "admin_password": PASSWORD})
    bootstrap(settings)
    return settings["state_dir"]


def wanted(state_dir):
    store = Store(state_dir)
    try:
        return ondemand.wanted(store)
    finally:
        store.close()


def test_a_fresh_appliance_gives_no_on_demand_daemon_work(state_dir):
    assert wanted(state_dir) == []


def test_prepare_makes_the_lock_file_of_every_watched_kind(state_dir):
    lock = lambda kind: os.path.join(state_dir, LOCK_DIR, kind + ".lock")  # noqa: E731
    kinds = [kind for kinds in ON_DEMAND.values() for kind in kinds]
    assert not all(os.path.exists(lock(kind)) for kind in kinds)
    store = Store(state_dir)
    try:
        ondemand.prepare(store)
        assert ondemand.wanted(store) == []          # opening a kind writes no record
    finally:
        store.close()
    assert [kind for kind in kinds if not os.path.exists(lock(kind))] == []


@pytest.mark.parametrize("name", sorted(ON_DEMAND))
def test_a_record_of_any_watched_kind_is_work(state_dir, name):
    for kind in ON_DEMAND[name]:
        store = Store(state_dir)
        try:
            record = store.collection(kind).insert({"name": "x", "sync_to_ecosystem": True})
            # an SSH key is the delivery daemon's work and, as a master, the status daemon's
            assert ondemand.wanted(store) == [n for n in ON_DEMAND if kind in ON_DEMAND[n]]
            assert name in ondemand.wanted(store), kind
            store.collection(kind).delete(record["uuid"])
            assert ondemand.wanted(store) == [], kind
        finally:
            store.close()


def test_through_the_api_a_secret_is_delivery_s_work_and_a_domain_the_mirror_s_once_synced(
        state_dir):
    server = ApiServer(state_dir, PASSWORD).start()
    try:
        admin = server.client(server.login("admin", PASSWORD))
        secret = admin.post("/v1/secret/secrets", {
            "name": "s", "project_id": ADMIN_PROJECT, "constructor": {"kind": "plain"},
            "value": "v"})
        assert secret.status == 201, secret
        assert wanted(state_dir) == ["delivery"]
        domain = admin.post("/v1/dns/domains", {"name": "quiet.test",
                                                "project_id": ADMIN_PROJECT})
        assert domain.status == 201, domain
        assert wanted(state_dir) == ["delivery"]
        synced = admin.put(f"/v1/dns/domains/{domain.json['uuid']}",
                           {"sync_to_ecosystem": True})
        assert synced.status == 200, synced
        assert wanted(state_dir) == ["delivery", "mirror"]
    finally:
        server.stop()


# in ON_DEMAND's order, the capabilities' (appliance/capabilities.py)
PATH_UNITS = ("appliance-delivery.path", "appliance-certificates.path", "appliance-mirror.path",
              "appliance-builder.path", "appliance-status.path", "appliance-sqldb.path",
              # the timed sleepers' waker (state/wake.py), after its folder was emptied
              "appliance-wake.path")


def test_first_boot_starts_the_path_units_then_the_daemons_with_work(tmp_path):
    calls = []
    paths = make_paths(tmp_path)
    boot(tmp_path, paths, systemctl=lambda *args: calls.append(args))
    assert calls == [("start", *PATH_UNITS)]            # a fresh state: no daemon has work
    store = Store(str(tmp_path / "state"))
    try:
        store.collection("sqldb_instances").insert({"name": "db"})
        store.collection("secret_secrets").insert({"name": "s"})
    finally:
        store.close()
    calls.clear()
    boot(tmp_path, paths, systemctl=lambda *args: calls.append(args))
    assert calls == [("start", *PATH_UNITS),
                     ("--no-block", "start", "appliance-delivery.service"),
                     ("--no-block", "start", "appliance-sqldb.service")]


def test_the_path_units_start_after_their_lock_files_exist_and_before_the_mark(tmp_path):
    paths = make_paths(tmp_path)
    seen = {}

    def systemctl(*args):
        if args[0] == "start":
            locks = tmp_path / "state" / LOCK_DIR
            seen["locks"] = all((locks / f"{kind}.lock").exists()
                                for kinds in ON_DEMAND.values() for kind in kinds)
            seen["mark"] = os.path.exists(paths.done_mark)
    boot(tmp_path, paths, systemctl=systemctl)
    assert seen == {"locks": True, "mark": False}
    assert os.path.exists(paths.done_mark)


def test_first_boot_makes_the_sleep_and_wake_folders_for_the_appliance_user_and_empties_them(
        tmp_path):
    """state/wake.py: the daemons (the appliance user) sleep in `.sleep/<kind>/` and are
    woken by `.wake/<name>`; a mark or an entry left by the last boot is gone before the
    path units watch, so it starts nothing and no writer of this boot wakes a process that
    is not there."""
    from state import wake
    paths = make_paths(tmp_path)
    state = tmp_path / "state"
    owner = (os.getuid() + 1000, os.getgid() + 1000) if os.geteuid() == 0 else None
    boot(tmp_path, paths, owner=owner)
    (state / ".sleep" / "secret_secrets").mkdir()
    (state / ".sleep" / "secret_secrets" / "appliance-delivery").touch()
    (state / ".wake" / "appliance-delivery").touch()
    (state / ".sleep" / ".at" / "appliance-builder").touch()        # a timed sleep
    seen = {}

    def systemctl(*args):
        if args[0] == "start":       # the path units: from here on a mark starts a daemon
            seen["wake"] = os.listdir(state / ".wake")
            seen["sleep"] = os.listdir(state / ".sleep" / "secret_secrets")
            seen["timed"] = os.listdir(state / ".sleep" / ".at")
    boot(tmp_path, paths, owner=owner, systemctl=systemctl)
    assert seen == {"wake": [], "sleep": [], "timed": []}
    for folder in (wake.SLEEP_DIR, os.path.join(wake.SLEEP_DIR, wake.TIMED_DIR),
                   wake.WAKE_DIR):
        st = os.stat(state / folder)
        if owner is not None:
            assert (st.st_uid, st.st_gid) == owner, folder


def test_without_path_units_first_boot_starts_every_on_demand_daemon(tmp_path, caplog):
    calls = []

    def systemctl(*args):
        if args[0] == "start":
            raise subprocess.CalledProcessError(5, ["systemctl", *args])
        calls.append(args)
    boot(tmp_path, make_paths(tmp_path), systemctl=systemctl)
    assert calls == [("--no-block", "start", f"appliance-{name}.service") for name in ON_DEMAND]
    assert "could not start the path units" in caplog.text


def test_a_start_that_fails_is_logged_and_first_boot_goes_on(caplog):
    def broken(*args):
        raise OSError("no systemctl here")
    ondemand.start(["builder"], broken)
    assert "could not start appliance-builder.service" in caplog.text


# ---- the table against the daemons ----------------------------------------------------------

def test_every_on_demand_daemon_is_a_daemon_and_the_always_on_ones_stay():
    assert set(ON_DEMAND) <= set(DAEMONS)
    # the node agent serves every node, DNS answers port 53, compute watches the local
    # hypervisor first boot registers: each has work from the first boot
    assert {"agent", "dns", "compute"}.isdisjoint(ON_DEMAND)


def test_delivery_s_kinds_are_the_secret_kinds():
    from appliance.secret.delivery import SecretDelivery
    assert set(ON_DEMAND["delivery"]) == set(SecretDelivery.kinds)


def test_the_status_daemon_s_kinds_are_the_masters_agents_apply():
    from appliance.agent.capabilities import MASTERS
    from daemons.status import AgentStatus
    assert set(ON_DEMAND["status"]) == set(MASTERS.values())
    # the daemon watches them (and what else can move their status)
    assert set(ON_DEMAND["status"]) <= set(AgentStatus.kinds.fget(None))


def test_the_other_daemons_watch_their_on_demand_kinds(tmp_path):
    from appliance.app import build_api
    from daemons.certificates import Certificates
    from daemons.mirror import Mirror
    from daemons.sqldb import Sqldb
    for cls in (Certificates, Mirror, Sqldb):
        assert set(ON_DEMAND[cls.name]) <= set(cls.kinds), cls.name
    # the builder watches every kind a manifest can touch: the repositories' and the
    # Element Manager's are where its work starts
    settings = settings_for(tmp_path / "state")
    api = build_api(settings)
    try:
        kinds = {r.kind for r in api.resources.values()}
    finally:
        api.store.close()
    assert set(ON_DEMAND["builder"]) <= kinds
    assert {k for k in kinds if k.startswith(("repo_", "em_")) and k != "em_services"} \
        == set(ON_DEMAND["builder"])
