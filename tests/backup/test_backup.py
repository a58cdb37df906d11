"""`appliance backup` / `appliance restore`: a backup of a live appliance, the state wiped,
restored: every API read the same. Every kind of bad backup refused, saying which, with the
state dir's bytes unchanged; a restore refused while the appliance runs; backups taken while
other processes write are consistent."""

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

from appliance import config, migrations
from appliance.bootstrap import bootstrap
from appliance.iam.builtin import ADMIN_PROJECT
from state import Store
from state import backup as archive
from tests.apiserver import ApiServer
from tests.backup.conftest import ROOT, cli, cli_process, clean_environ, state_bytes
from tests.conftest import ADMIN_PASSWORD, SECRET_VALUES
from tests.supervisor.test_supervisor import Up


def populate(admin):
    """A few records of every kind the API writes directly (seeds do the rest)."""
    def made(path, body):
        resp = admin.post(path, body)
        assert resp.status == 201, resp
        for key in ("value", "private_key"):
            if resp.json.get(key):
                SECRET_VALUES.add(resp.json[key])
        return resp.json

    for i in range(3):
        made("/v1/iam/users", {"username": f"user{i}", "password": f"pass-word-{i}"})
        made("/v1/iam/projects", {"name": f"project{i}"})
        made("/v1/secret/secrets", {"name": f"s{i}", "project_id": ADMIN_PROJECT,
                                    "value": f"value-{i}-of-the-backup-test"})
        made("/v1/secret/passwords", {"name": f"p{i}", "project_id": ADMIN_PROJECT})
    made("/v1/secret/ssh_keys", {"name": "ssh", "project_id": ADMIN_PROJECT})
    made("/v1/secret/rsa_keys", {"name": "rsa", "project_id": ADMIN_PROJECT})
    domain = made("/v1/dns/domains", {"name": "backup.test", "project_id": ADMIN_PROJECT})
    made(f"/v1/dns/domains/{domain['uuid']}/records",
         {"type": "A", "record": {"kind": "A", "name": "www", "address": "10.9.8.7"}})
    # a TXT record longer than one character-string and than a UDP answer (issue 27)
    made(f"/v1/dns/domains/{domain['uuid']}/records",
         {"type": "TXT", "record": {"kind": "TXT", "name": "long", "content": "x" * 5000}})


def every_read(srv, admin):
    """The answer to a GET of every collection of the API (and each domain's records)."""
    reads = {}
    for path in srv.api.resources:
        if "<" not in path:
            resp = admin.get(path)
            reads[path] = (resp.status, resp.json)
    for domain in reads["/v1/dns/domains"][1]:
        path = f"/v1/dns/domains/{domain['uuid']}/records"
        resp = admin.get(path)
        reads[path] = (resp.status, resp.json)
    return reads


def every_record(state):
    store = Store(state)
    try:
        return {kind: store.collection(kind).records() for kind in store.kinds()}
    finally:
        store.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A populated appliance (its API running), a backup of it taken meanwhile through the
    CLI, and what every read answered."""
    folder = tmp_path_factory.mktemp("live")
    state = str(folder / "state")
    srv = ApiServer(state, ADMIN_PASSWORD).start()
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    populate(admin)
    reads = every_read(srv, admin)
    token = admin.token
    file = str(folder / "live.tar.gz")
    done = cli("backup", "--state-dir", state, file)
    assert done.code == 0, done.stderr
    srv.stop()
    return {"state": state, "file": file, "reads": reads, "token": token,
            "records": every_record(state), "folder": folder, "cli": done}


def test_backup_wipe_restore_gives_the_same_reads_of_every_kind(live, tmp_path):
    assert f"written to {live['file']}" in live["cli"].stdout
    assert "backup [" in live["cli"].stderr               # progress
    assert os.stat(live["file"]).st_mode & 0o777 == 0o600
    state = str(tmp_path / "state")                         # wiped: not even the directory
    done = cli_process("restore", "--state-dir", state, live["file"])
    assert done.code == 0, done.stderr
    assert "restored" in done.stdout and "check [" in done.stderr
    assert every_record(state) == live["records"]
    srv = ApiServer(state, ADMIN_PASSWORD).start()
    try:
        # the token signed before the backup still opens the API: the keys came back
        admin = srv.client(live["token"])
        assert every_read(srv, admin) == live["reads"]
        assert all(status == 200 for status, _ in live["reads"].values())
    finally:
        srv.stop()


def test_restore_replaces_what_was_there(live, tmp_path):
    state = str(tmp_path / "state")
    other = Store(state)
    other.collection("leftover_kind").insert({"x": 1})
    other.collection("iam_users").insert({"username": "not-in-the-backup"})
    other.write_private("leftover-key", b"old")
    other.close()
    assert cli("restore", "--quiet", "--state-dir", state, live["file"]).code == 0
    assert every_record(state) == live["records"]
    assert not os.path.exists(os.path.join(state, "leftover-key"))
    assert not os.path.exists(os.path.join(state, ".rollback"))


def test_the_manifest_lists_versions_kinds_counts_and_checksums(live):
    with tarfile.open(live["file"]) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("manifest.json"))
        assert names[0] == "manifest.json"
        assert manifest["schema_version"] == migrations.latest()
        assert manifest["appliance_version"]
        assert manifest["kinds"] == {k: len(v) for k, v in live["records"].items()}
        assert set(manifest["members"]) == set(names[1:])
        assert "private/jwt-signing.key" in names and "private/secret-encryption.key" in names
        for name in names[1:]:
            data = tar.extractfile(name).read()
            assert manifest["members"][name]["sha256"] == hashlib.sha256(data).hexdigest()


# ---- bad backups ---------------------------------------------------------------------------

def members_of(file):
    with tarfile.open(file) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def tar_gz(members):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def edited(file, change):
    """The backup with its manifest edited by change(manifest), members as they were."""
    members = members_of(file)
    manifest = json.loads(members[0][1])
    change(manifest)
    return tar_gz([("manifest.json", json.dumps(manifest).encode())] + members[1:])


def tampered(file):
    """One member changed after the fact, the manifest as it was: checksum mismatch."""
    members = members_of(file)
    return tar_gz([(n, d.replace(b"user1", b"userX") if n == "kinds/iam_users.json" else d)
                   for n, d in members])


def flipped(data):
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    return bytes(bad)


BAD = {
    "truncated-half": (lambda f, raw: raw[:len(raw) // 2], "is truncated"),
    "truncated-tail": (lambda f, raw: raw[:-3], "is truncated"),
    "missing-member": (lambda f, raw: tar_gz(members_of(f)[:-1]), "is truncated"),
    "checksum": (lambda f, raw: tampered(f), "is corrupted: the checksum of "
                                             "kinds/iam_users.json"),
    "flipped-byte": (lambda f, raw: flipped(raw), "is corrupted"),
    "count-mismatch": (lambda f, raw: edited(f, lambda m: m["kinds"].update(iam_users=99)),
                       "is corrupted: kinds/iam_users.json holds"),
    "newer-schema": (lambda f, raw: edited(f, lambda m: m.update(
        schema_version=migrations.latest() + 1)), "is newer than this appliance: state "
                                                  "schema version"),
    "newer-format": (lambda f, raw: edited(f, lambda m: m.update(format_version=99)),
                     "is newer than this appliance: backup format 99"),
    "text": (lambda f, raw: b"hello, I am no backup\n", "not an appliance backup"),
    "empty": (lambda f, raw: b"", "not an appliance backup"),
    "gzip-of-text": (lambda f, raw: gzip.compress(b"plain text" * 100),
                     "not an appliance backup"),
    "tar-without-manifest": (lambda f, raw: tar_gz(members_of(f)[1:]),
                             "not an appliance backup: no manifest.json"),
    "other-json-manifest": (lambda f, raw: tar_gz([("manifest.json", b'{"a": 1}')]),
                            "not an appliance backup"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_backup_is_refused_saying_why_and_nothing_changes(live, tmp_path, case):
    make, message = BAD[case]
    with open(live["file"], "rb") as f:
        raw = f.read()
    bad = tmp_path / f"{case}.tar.gz"
    bad.write_bytes(make(live["file"], raw))
    state = str(tmp_path / "state")
    shutil.copytree(live["state"], state)
    before = state_bytes(state)                     # lock files included: none was taken
    done = cli("restore", "--state-dir", state, str(bad))
    assert done.code == 1
    error = done.stderr.splitlines()[-1]              # after the progress lines
    assert error.startswith(f"error: restore refused: {bad}: ")
    assert message in error, done.stderr
    assert state_bytes(state) == before


def test_a_missing_backup_file_is_refused(tmp_path):
    done = cli("restore", "--state-dir", str(tmp_path / "state"), str(tmp_path / "nope"))
    assert done.code == 1 and "cannot read the file: No such file" in done.stderr
    assert not os.path.exists(tmp_path / "state")


# ---- running appliance -----------------------------------------------------------------

def test_restore_is_refused_while_a_process_has_the_state_open(live, tmp_path):
    state = str(tmp_path / "state")
    shutil.copytree(live["state"], state)
    srv = ApiServer(state, ADMIN_PASSWORD).start()          # this process serves it
    try:
        before = state_bytes(state)
        done = cli_process("restore", "--state-dir", state, live["file"])
        assert done.code == 1
        assert "is in use" in done.stderr and f"process {os.getpid()}" in done.stderr
        assert "stop it first" in done.stderr
        assert state_bytes(state) == before
    finally:
        srv.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_backup_works_and_restore_is_refused_under_appliance_up(live, tmp_path):
    up = Up(tmp_path)
    try:
        up.wait_line("appliance API is ready")
        backup = str(tmp_path / "up.tar.gz")
        done = cli_process("backup", "--state-dir", str(up.state_dir), backup)
        assert done.code == 0, done.stderr
        manifest = archive.read(backup, migrations.latest()).manifest
        assert manifest["kinds"]["iam_users"] >= 1
        users = every_record(str(up.state_dir))["iam_users"]
        done = cli_process("restore", "--state-dir", str(up.state_dir), live["file"])
        assert done.code == 1 and "is in use" in done.stderr, done.stderr
        # the processes named are the appliance's own (each opened the state after fork)
        named = {int(p) for p in re.search(r"process ([\d, ]+)", done.stderr).group(1)
                 .split(", ")}
        assert named and named <= set(up.tree()) | {up.proc.pid}
        # the daemons may write statuses meanwhile, so no byte comparison here; but the
        # users are this appliance's still, not the backup's
        assert every_record(str(up.state_dir))["iam_users"] == users
    finally:
        up.close()


# ---- consistency under writers ---------------------------------------------------------

WRITERS, BATCHES, BATCH = 2, 120, 20


@pytest.mark.timeout(300)
def test_backups_taken_while_processes_write_are_consistent(tmp_path):
    state = str(tmp_path / "state")
    Store(state).close()
    writer = os.path.join(ROOT, "tests", "state", "writer.py")
    # a small compaction threshold: backups also land in the middle of compactions
    procs = [subprocess.Popen([sys.executable, writer, state, "batch", str(BATCHES), "20000"],
                              cwd=ROOT, env=clean_environ(PYTHONPATH=ROOT),
                              stdout=subprocess.DEVNULL)
             for _ in range(WRITERS)]
    taken = []
    try:
        while any(p.poll() is None for p in procs):
            path = str(tmp_path / f"b{len(taken)}.tar.gz")
            archive.create(state, path)
            taken.append(path)
    finally:
        for p in procs:
            p.wait(timeout=120)
    assert all(p.returncode == 0 for p in procs)
    final = str(tmp_path / "final.tar.gz")
    archive.create(state, final)
    taken.append(final)
    assert len(taken) >= 3
    counts = []
    for path in taken:
        backup = archive.read(path, migrations.latest())      # checksums and counts hold
        count = backup.manifest["kinds"].get("things", 0)
        # one batch is one write: a backup holds all of a batch or none of it
        assert count % BATCH == 0, (path, count)
        counts.append(count)
        restored = str(tmp_path / f"r-{os.path.basename(path)}")
        archive.restore(restored, backup)
        loaded = Store(restored)
        assert loaded.collection("things").count() == count      # loads cleanly
        loaded.close()
    assert counts == sorted(counts)
    assert counts[-1] == WRITERS * BATCHES * BATCH


# ---- the command line --------------------------------------------------------------------

def test_help_explains_the_commands():
    for command in ("backup", "restore"):
        done = cli(command, "--help")
        assert done.code == 0 and "exit codes" in done.stdout and "--state-dir" in done.stdout
    assert "backup" in cli("--help").stdout and "restore" in cli("--help").stdout
    assert cli("backup").code == 2                      # FILE is required


def test_backup_of_a_missing_state_dir_fails_and_writes_nothing(tmp_path):
    done = cli("backup", "--state-dir", str(tmp_path / "none"), str(tmp_path / "b.tar.gz"))
    assert done.code == 1 and "no state directory at" in done.stderr
    assert os.listdir(tmp_path) == []


def test_a_backup_that_cannot_be_written_leaves_nothing(live, tmp_path):
    done = cli("backup", "--state-dir", live["state"], str(tmp_path / "no" / "b.tar.gz"))
    assert done.code == 1 and "backup failed" in done.stderr
    assert os.listdir(tmp_path) == []


def test_the_state_dir_comes_from_the_environment_or_the_config_file(live, tmp_path):
    out = str(tmp_path / "env.tar.gz")
    done = cli("--json", "backup", "--quiet", out,
               environ={"APPLIANCE_STATE_DIR": live["state"]})
    assert done.code == 0 and done.stderr == ""
    assert json.loads(done.stdout)["records"] == sum(map(len, live["records"].values()))
    config = tmp_path / "appliance.yaml"
    config.write_text(f"state_dir: {live['state']}\n")
    done = cli("backup", "--config", str(config), str(tmp_path / "conf.tar.gz"))
    assert done.code == 0 and live["state"] in done.stdout
    config.write_text("backup_keep: 0\n")
    done = cli("backup", "--config", str(config), str(tmp_path / "bad.tar.gz"))
    assert done.code == 2 and "backup_keep must be 1 or more" in done.stderr


KILLED_RESTORE = """
import os, signal, sys
from state import Store
from state import backup as archive
written = []
original = Store.write_base

def write_then_die(self, kind, payload):
    original(self, kind, payload)
    written.append(kind)
    if len(written) == 3:
        os.kill(os.getpid(), signal.SIGKILL)

Store.write_base = write_then_die
archive.restore(sys.argv[1], archive.read(sys.argv[2], 10 ** 6))
"""


@pytest.mark.timeout(120)
def test_a_restore_killed_half_way_is_undone_by_the_next_start(live, tmp_path):
    state = str(tmp_path / "state")
    mine = Store(state)
    mine.collection("iam_users").insert({"username": "mine"})
    mine.write_private("jwt-signing.key", b"my own key")
    # at the current version: only the rollback point left behind tells start-up to act
    mine.set_schema_version(migrations.latest())
    mine.close()
    before = state_bytes(state, with_locks=False)
    done = subprocess.run([sys.executable, "-c", KILLED_RESTORE, state, live["file"]],
                          cwd=ROOT, env=clean_environ(PYTHONPATH=ROOT), timeout=110)
    assert done.returncode == -9
    assert state_bytes(state, with_locks=False) != before
    # what every start runs first: the old state is back
    bootstrap(config.load(environ={}, overrides={"state_dir": state,
                                                 "admin_password": ADMIN_PASSWORD}))
    reopened = Store(state)
    try:
        assert not reopened.interrupted()
        assert [u["username"] for u in reopened.collection("iam_users").records()][0] == "mine"
        assert reopened.read_private("jwt-signing.key") == b"my own key"
    finally:
        reopened.close()
