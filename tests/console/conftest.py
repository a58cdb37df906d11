"""Fixtures of the web console's tests (docs/console.md): a real API on Waitress with a
console folder of its own (the server-side tests), and a real `appliance up` driven by
headless Chromium (the browser tests, below)."""

import os

import pytest

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>appliance</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="app.css?v={{v}}">
<script type="module" src="js/main.js?v={{v}}"></script></head>
<body><main><h1>Appliance console</h1><p id="status">loading</p></main></body></html>
"""
MAIN_JS = """import { show } from "./show.js";
show(document.getElementById("status"), "ready");
"""
SHOW_JS = """export function show(element, text) { element.textContent = text; }
"""
APP_CSS = "body { font-family: sans-serif; }\n"


def write_console(folder):
    """A tiny front end of the shape the real one has (index.html naming js/main.js with
    ?v={{v}}, a module it imports by relative name, a stylesheet): the server-side tests do
    not depend on the front end's files (appliance/console/static/, another part's)."""
    os.makedirs(os.path.join(folder, "js"), exist_ok=True)
    for name, text in (("index.html", PAGE), ("js/main.js", MAIN_JS),
                       ("js/show.js", SHOW_JS), ("app.css", APP_CSS)):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    return folder


@pytest.fixture(scope="module")
def console_dir(tmp_path_factory):
    return write_console(str(tmp_path_factory.mktemp("console")))


@pytest.fixture(scope="module")
def server(tmp_path_factory, console_dir):
    """A real API (Waitress on loopback) serving the console from `console_dir`."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    console_static_dir=console_dir).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def admin(server):
    return server.client(server.login("admin", ADMIN_PASSWORD))


# ---- the browser tests: a real `appliance up` and headless Chromium ----------------------
#
# The browser, its pages and the screenshots are tests/browser.py's (shared with the image's
# and the bench's use of the console).

import glob  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

from appliance.console.files import DEFAULT_DIR  # noqa: E402
from tests.apiserver import TOKEN_PATH, Client, free_port  # noqa: E402
from tests.browser import CSP_PROBE, browser, csp_violations, shot, watched_page  # noqa: E402,F401
from tests.waiting import eventually  # noqa: E402

CONSOLE_PASSWORD = "console-admin-password"


def real_front_end():
    """Whether the front end's own files are there (appliance/console/static/, another
    part's work); without them the browser tests serve write_console()'s page."""
    return os.path.isfile(os.path.join(DEFAULT_DIR, "index.html"))


class ConsoleAppliance:
    """What a browser test needs of the running appliance."""

    def __init__(self, up, console_dir):
        self.up = up
        self.api_port = up.api_port
        self.url = f"http://127.0.0.1:{up.api_port}"
        self.console_url = self.url + "/console/"
        self.admin_password = CONSOLE_PASSWORD
        # None: the package's own static/ folder (the real front end)
        self.console_dir = console_dir
        self.client = Client("127.0.0.1", up.api_port)
        token = self.client.post(TOKEN_PATH, {
            "grant_type": "password", "username": "admin", "password": CONSOLE_PASSWORD,
            "scope": ""}).json["access_token"]
        self.admin = self.client.with_token(token)


@pytest.fixture(scope="session")
def console_appliance(tmp_path_factory):
    """`appliance up` (make run's entry point) on free loopback ports, in a temporary state
    folder with a known admin password, as the supervisor's tests start it
    (tests/supervisor/test_supervisor.py, Up)."""
    from tests.supervisor.test_supervisor import Up  # noqa: PLC0415
    # short, under /tmp: PostgreSQL's socket path (sqldb, on demand) has a length limit
    base = tempfile.mkdtemp(prefix="console-", dir="/tmp")
    os.chmod(base, 0o755)
    state = os.path.join(base, "var")
    console_dir = None
    env = {"APPLIANCE_ADMIN_PASSWORD": CONSOLE_PASSWORD,
           "APPLIANCE_SQLDB_PORT": str(free_port()),
           # a long poll ends at once on a change anyway; a short one makes the stop quick
           "APPLIANCE_AGENT_POLL_WAIT": "5"}
    if not real_front_end():
        console_dir = write_console(os.path.join(base, "console"))
        env["APPLIANCE_CONSOLE_STATIC_DIR"] = console_dir
    running = Up(tmp_path_factory.mktemp("up"), state_dir=state, extra_env=env)
    try:
        running.wait_line("appliance API is ready at ")
        yield ConsoleAppliance(running, console_dir)
    finally:
        running.tree()
        running.close()
        from appliance import devnode  # noqa: PLC0415
        from appliance.sqldb import pg  # noqa: PLC0415
        for run in glob.glob(os.path.join(state, devnode.ROOT,
                                          "var/lib/appliance/sqldb/*/run")):
            shutil.rmtree(pg.socket_dir(run, int(env["APPLIANCE_SQLDB_PORT"])),
                          ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def page(browser):
    """A page in a fresh browser context (its own cookies), laptop-sized. Its console
    messages are in `page.console_messages` ([(type, text)]) and `csp_violations(page)`
    tells what the page's CSP refused; `page.failed_responses` is [(status, url)] of every
    answer >= 400 it got (tests/browser.py, watched_page)."""
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    context.add_init_script(CSP_PROBE)
    yield watched_page(context)
    context.close()


@pytest.fixture
def login(console_appliance):
    """login(page, user, password, project=None, via="form"): log the page's context in.
    via="form": through the console's login form (its hooks: inputs named username and
    password, a button "Log in"; docs/console.md); via="api": POST /console/session from
    the page's context, which keeps the cookies, for tests about something else."""

    def log_in(page, user="admin", password=CONSOLE_PASSWORD, project=None, via="form"):
        if via == "api":
            data = {"username": user, "password": password}
            if project is not None:
                data["project"] = project
            resp = page.context.request.post(console_appliance.url + "/console/session",
                                             data=data)
            assert resp.status == 200, resp.text()
            return resp.json()
        page.goto(console_appliance.console_url + "#/login")
        page.locator('input[name="username"]').fill(user)
        page.locator('input[name="password"]').fill(password)
        page.get_by_role("button", name="Log in").click()
        eventually(lambda: any(c["name"] == "appliance_session"
                               for c in page.context.cookies()),
                   30, "the session cookie after logging in")
        return None
    return log_in


from tests import tmpfs  # noqa: E402

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
