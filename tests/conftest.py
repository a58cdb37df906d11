import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

pytest_plugins = ["tests.disk_watch", "tests.suite_time"]

from appliance.iam import passwords  # noqa: E402
from tests.apiserver import ApiServer  # noqa: E402


def _remember_matches(verify):
    """passwords.verify for the servers of this process, remembering the (password, hash)
    pairs that matched: the suite logs in as the same user thousands of times, and each
    scrypt costs a tenth of a second to a third (a tenth of the suite's time went there).
    The KDF is a pure function, so a pair that matched matches again; only matches are
    kept, so a wrong password and an unknown user (its dummy hash) still run the KDF each
    time (tests/iam/test_tokens.py times the two against each other)."""
    matched = set()

    def remembering(password, encoded):
        if encoded is not None and (password, encoded) in matched:
            return True
        ok = verify(password, encoded)
        if ok:
            matched.add((password, encoded))
        return ok
    return remembering


passwords.verify = _remember_matches(passwords.verify)

ADMIN_PASSWORD = "admin-password-for-tests"


def _one_hash_of_the_admin_password(hash_password):
    """passwords.hash_password, giving the one hash it made first for the tests' admin
    password: each server of the run seeds its admin with it (bootstrap), a scrypt per
    server started, and then the first login on each ran another. A salt shared by the
    admins of throwaway state directories changes nothing a test looks at; every other
    password gets a fresh salt and its own scrypt."""
    made = []

    def hashing(password):
        if password != ADMIN_PASSWORD:
            return hash_password(password)
        if not made:
            made.append(hash_password(password))
        return made[0]
    return hashing


passwords.hash_password = _one_hash_of_the_admin_password(passwords.hash_password)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real Waitress server on a loopback port, over a fresh state dir, per test module."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    yield srv
    srv.stop()


@pytest.fixture
def fresh_server(tmp_path):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def playwright_driver():
    """Playwright's one driver for the whole run: its sync API cannot start a second time in
    a thread while the first runs, and both the console's browser tests and the image's
    HTTPS test launch Chromium (tests/browser.py)."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="module")
def admin(server):
    return server.client(server.login("admin", ADMIN_PASSWORD))


# ---- logs of the whole run, so that tests can grep them (no secret in any log) ----------

import logging  # noqa: E402
import tempfile  # noqa: E402

RUN_LOG_DIR = tempfile.mkdtemp(prefix="appliance-test-logs-")
# values handed to the API as secrets during the run; tests/secret/test_zz_logs.py greps
SECRET_VALUES = set()


@pytest.fixture(scope="session", autouse=True)
def run_logs():
    handler = logging.FileHandler(os.path.join(RUN_LOG_DIR, "in-process.log"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    loggers = [logging.getLogger(n) for n in ("appliance", "daemons", "state", "waitress")]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield RUN_LOG_DIR
    for lg in loggers:
        lg.removeHandler(handler)


# ---- the image builds of the run, in the background (tests/image/prebuild.py) -------------

def pytest_collection_finish(session):
    from tests.image import prebuild
    if session.config.option.collectonly:
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # only slow tests boot or build images: a run of the quick ones starts no build
    prebuild.start([item.nodeid.split("::")[0] for item in session.items
                    if item.get_closest_marker("slow")], root)


def pytest_sessionfinish(session):
    from tests.image import prebuild
    prebuild.stop()
