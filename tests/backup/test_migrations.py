"""Schema migrations: discovered from their directory, run in order at start, idempotent,
all or nothing (a failure or a kill leaves the state byte-identical), a newer state refused
by the code and by the processes that would serve it."""

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from appliance import migrations
from appliance.migrations import MigrationError, MigrationFailed, SchemaTooNew, migrate
from state import Store
from tests.apiserver import ApiServer
from tests.backup.conftest import ROOT, clean_environ, state_bytes
from tests.conftest import ADMIN_PASSWORD

# a migration that notes its run in the kind `ran`, once (idempotent by its own check)
NOTE = """
'''Note migration {n} in the kind `ran`.'''

def apply(store):
    ran = store.collection("ran")
    if ran.find_one(n={n}) is None:
        ran.insert({{"n": {n}}})
"""


def package(tmp_path, monkeypatch, files):
    """A package of migration files of its own (a fresh name: imports are cached)."""
    name = f"migs_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for file, text in files.items():
        (folder / file).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return str(folder), name


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "state"))
    yield s
    s.close()


def test_the_real_migrations_are_found_in_order_each_with_a_docstring():
    found = migrations.discover()
    assert [m.number for m in found] == sorted(m.number for m in found)
    assert found[0].number == 1 and found[0].name == "rsa_key_bitness"
    assert all(m.doc for m in found)
    assert migrations.latest() == found[-1].number


def test_migrations_run_in_order_once_and_stamp_the_version(tmp_path, monkeypatch, store):
    # listed out of order on purpose, with a gap, and a file that is no migration
    folder, name = package(tmp_path, monkeypatch, {
        "0010_ten.py": NOTE.format(n=10), "0002_two.py": NOTE.format(n=2),
        "0001_one.py": NOTE.format(n=1), "README.txt": "not a migration"})
    found = migrations.discover(folder, name)
    assert [m.number for m in found] == [1, 2, 10]
    assert [m.number for m in migrate(store, found)] == [1, 2, 10]
    assert [r["n"] for r in store.collection("ran").records()] == [1, 2, 10]
    assert store.schema_version() == 10
    before = state_bytes(store.directory, with_locks=False)
    assert migrate(store, found) == []          # at the version: nothing runs again
    assert state_bytes(store.directory, with_locks=False) == before


def test_a_migration_run_twice_changes_nothing_the_second_time(tmp_path, monkeypatch, store):
    # a start that died after a migration ran but before the version was stamped runs it
    # again: the result must be the same
    folder, name = package(tmp_path, monkeypatch, {"0001_one.py": NOTE.format(n=1)})
    found = migrations.discover(folder, name)
    found[0].apply(store)
    once = store.collection("ran").records()
    found[0].apply(store)
    assert store.collection("ran").records() == once


def test_only_migrations_past_the_state_version_run(tmp_path, monkeypatch, store):
    folder, name = package(tmp_path, monkeypatch, {
        "0001_one.py": NOTE.format(n=1), "0002_two.py": NOTE.format(n=2)})
    store.set_schema_version(1)
    assert [m.number for m in migrate(store, migrations.discover(folder, name))] == [2]
    assert [r["n"] for r in store.collection("ran").records()] == [2]


@pytest.mark.parametrize("files, complaint", [
    ({"0001_a.py": NOTE.format(n=1), "0001_b.py": NOTE.format(n=2)}, "used twice"),
    ({"0001_a.py": "def apply(store):\n    pass\n"}, "docstring"),
    ({"0001_a.py": "'''No apply.'''\n"}, "apply(store)"),
])
def test_a_broken_migration_directory_is_refused(tmp_path, monkeypatch, files, complaint):
    folder, name = package(tmp_path, monkeypatch, files)
    with pytest.raises(MigrationError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        migrations.discover(folder, name)


FAILING = {
    "0001_rename.py": """
        '''Rewrite every thing and make a new kind.'''

        def apply(store):
            things = store.collection("things")
            for r in things.records():
                things.update(r["uuid"], {"name": r["name"].upper()})
            things.compact()
            store.collection("made").insert({"by": 1})
            store.write_private("made-key", b"new")
        """,
    "0002_fail.py": """
        '''Write, then fail.'''

        def apply(store):
            store.collection("things").insert({"name": "half"})
            raise RuntimeError("disk on fire")
        """,
}


def fill(store):
    things = store.collection("things")
    things.insert_many([{"name": f"t{i}"} for i in range(50)])
    things.delete(things.records()[0]["uuid"])      # a journal with more than inserts
    store.write_private("admin-password", b"secret")


def test_a_failing_migration_leaves_the_state_byte_identical(tmp_path, monkeypatch, store):
    fill(store)
    names = [r["name"] for r in store.collection("things").records()]
    before = state_bytes(store.directory, with_locks=False)
    folder, name = package(tmp_path, monkeypatch, FAILING)
    with pytest.raises(MigrationFailed) as failed:
        migrate(store, migrations.discover(folder, name))
    assert "0002 fail failed (RuntimeError: disk on fire)" in str(failed.value)
    assert "schema version 0" in str(failed.value)
    assert state_bytes(store.directory, with_locks=False) == before
    assert store.schema_version() == 0 and not store.interrupted()
    # this process's own view follows the files back, although it wrote the changes
    assert [r["name"] for r in store.collection("things").records()] == names
    assert store.collection("made").count() == 0
    # and so does a fresh process's
    other = Store(store.directory)
    assert [r["name"] for r in other.collection("things").records()] == names
    other.close()


KILLED = """
import sys
from appliance.migrations import discover, migrate
from state import Store
migrate(Store(sys.argv[1]), discover(sys.argv[2], sys.argv[3]))
"""


def test_a_migration_killed_half_way_is_rolled_back_at_the_next_start(tmp_path, monkeypatch,
                                                                      store):
    fill(store)
    names = {r["name"] for r in store.collection("things").records()}
    before = state_bytes(store.directory, with_locks=False)
    files = dict(FAILING)
    files["0002_fail.py"] = """
        '''Write, then die as a power cut would.'''
        import os, signal

        def apply(store):
            store.collection("things").insert({"name": "half"})
            os.kill(os.getpid(), signal.SIGKILL)
        """
    folder, name = package(tmp_path, monkeypatch, files)
    store.close()
    done = subprocess.run([sys.executable, "-c", KILLED, store.directory, folder, name],
                          cwd=ROOT, env=clean_environ(PYTHONPATH=f"{ROOT}:{tmp_path}"),
                          capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr
    after_crash = Store(store.directory)
    assert after_crash.interrupted()
    assert state_bytes(store.directory, with_locks=False) != before
    # the next start: migrate() recovers before anything else (here the same migrations
    # minus the killer, as a fixed version of the code would ship)
    os.remove(os.path.join(folder, "0002_fail.py"))
    assert [m.number for m in migrate(after_crash, migrations.discover(folder, name))] == [1]
    assert after_crash.schema_version() == 1 and not after_crash.interrupted()
    assert {r["name"] for r in after_crash.collection("things").records()} == {
        n.upper() for n in names}
    after_crash.close()


def test_recover_alone_restores_the_bytes_after_a_kill(tmp_path, monkeypatch, store):
    fill(store)
    before = state_bytes(store.directory, with_locks=False)
    files = dict(FAILING)
    files["0002_fail.py"] = files["0002_fail.py"].replace(
        'raise RuntimeError("disk on fire")', 'os.kill(os.getpid(), 9)').replace(
        "def apply", "import os\n\n        def apply")
    folder, name = package(tmp_path, monkeypatch, files)
    store.close()
    subprocess.run([sys.executable, "-c", KILLED, store.directory, folder, name], cwd=ROOT,
                   env=clean_environ(PYTHONPATH=f"{ROOT}:{tmp_path}"), timeout=120)
    again = Store(store.directory)
    again.recover()
    assert state_bytes(store.directory, with_locks=False) == before
    again.close()


def test_a_state_newer_than_the_code_is_refused_and_left_alone(store):
    fill(store)
    store.set_schema_version(migrations.latest() + 1)
    before = state_bytes(store.directory, with_locks=False)
    with pytest.raises(SchemaTooNew) as refused:
        migrate(store)
    message = str(refused.value)
    assert f"schema version {migrations.latest() + 1}" in message
    assert f"up to {migrations.latest()}" in message and "newer version" in message
    assert state_bytes(store.directory, with_locks=False) == before


def newer_state(tmp_path):
    state = tmp_path / "state"
    store = Store(str(state))
    store.set_schema_version(migrations.latest() + 5)
    store.close()
    config = tmp_path / "appliance.yaml"
    config.write_text("{}\n")
    return state, config


@pytest.mark.timeout(120)
def test_appliance_up_does_not_start_on_a_newer_state(tmp_path):
    state, config = newer_state(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "appliance.supervisor", "--state-dir", str(state),
         "--config", str(config), "--api-port", "1", "--dns-port", "1"],
        cwd=ROOT, env=clean_environ(PYTHONPATH=ROOT), capture_output=True, text=True,
        timeout=110)
    assert done.returncode == 1
    assert "newer than this appliance knows" in done.stderr
    assert "Traceback" not in done.stderr           # a message, not a crash
    assert "ready" not in done.stdout


@pytest.mark.timeout(120)
def test_the_api_process_does_not_serve_a_newer_state(tmp_path):
    state, config = newer_state(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "appliance.server"], cwd=ROOT, capture_output=True, text=True,
        env=clean_environ(PYTHONPATH=ROOT, APPLIANCE_STATE_DIR=str(state),
                          APPLIANCE_CONFIG=str(config), APPLIANCE_API_PORT="1"),
        timeout=110)
    assert done.returncode == 1
    assert "newer than this appliance knows" in done.stderr
    assert "serving" not in done.stderr


# ---- 0001: RSA keys stored under `bits` -----------------------------------------------------

def test_rsa_keys_stored_as_bits_read_as_bitness_after_the_start(tmp_path):
    state = str(tmp_path / "state")
    srv = ApiServer(state, ADMIN_PASSWORD).start()
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    made = admin.post("/v1/secret/rsa_keys", {
        "name": "old", "project_id": "00000000-0000-0000-0000-000000000000",
        "bitness": 2048}).json
    shown = admin.get(f"/v1/secret/rsa_keys/{made['uuid']}").json
    srv.stop()
    # what the code before the rename stored: `bits`, no `bitness`, and no schema version
    store = Store(state)
    keys = store.collection("secret_rsa_keys")
    keys.mutate(made["uuid"], lambda r: {**{k: v for k, v in r.items() if k != "bitness"},
                                         "bits": 2048})
    store.remove_files(["schema-version"])
    store.close()

    srv = ApiServer(state, ADMIN_PASSWORD).start()          # its bootstrap migrates
    try:
        stored = srv.store.collection("secret_rsa_keys").get(made["uuid"])
        assert stored["bitness"] == 2048 and "bits" not in stored
        assert srv.store.schema_version() == migrations.latest()
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        after = admin.get(f"/v1/secret/rsa_keys/{made['uuid']}").json
        # the sealed private key still opens: the migration moved a field, nothing else
        assert after["private_key"] == shown["private_key"]
        assert after["bitness"] == 2048 and "bits" not in after
        # idempotent: applied again, it writes nothing
        revision = stored["revision"]
        migrations.discover()[0].apply(srv.store)
        assert srv.store.collection("secret_rsa_keys").get(made["uuid"])["revision"] == revision
    finally:
        srv.stop()


def test_health_tells_the_schema_version_served(tmp_path):
    # what the image's upgrade test reads from the host after booting a newer build
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD).start()
    try:
        health = srv.client().get("/v1/health").json
        assert health["schema_version"] == migrations.latest() == srv.store.schema_version()
    finally:
        srv.stop()
