"""The trail is part of the state's backups: a restore brings it back, exactly as it was
when the backup was taken (entries written after it are gone with the rest)."""

from appliance import backup
from tests.apiserver import ApiServer
from tests.audit.conftest import entries, trail_bytes
from tests.conftest import ADMIN_PASSWORD


def test_a_restore_brings_the_trail_back(tmp_path):
    state = str(tmp_path / "state")
    srv = ApiServer(state, ADMIN_PASSWORD).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        kept = admin.post("/v1/iam/organizations/", {"name": "before-backup"})
        assert kept.status == 201
        before = entries(admin)
    finally:
        srv.stop()
    archive = str(tmp_path / "backup.tar.gz")
    manifest = backup.take(srv.settings, archive)
    assert any(name.startswith("private/audit-") for name in manifest["members"])

    srv = ApiServer(state, ADMIN_PASSWORD).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        later = admin.post("/v1/iam/organizations/", {"name": "after-backup"})
        assert later.status == 201
    finally:
        srv.stop()

    for target in (state, str(tmp_path / "empty")):
        settings = {**srv.settings, "state_dir": target}
        backup.restore(settings, backup.check(archive))
        restored = trail_bytes(target)
        assert kept.header("X-Request-Id").encode() in restored
        assert later.header("X-Request-Id").encode() not in restored
    again = ApiServer(str(tmp_path / "empty"), ADMIN_PASSWORD).start()
    try:
        admin = again.client(again.login("admin", ADMIN_PASSWORD))
        after = entries(admin)
    finally:
        again.stop()
    assert after[:len(before)] == before
